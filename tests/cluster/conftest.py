"""The embedded llama.cpp the cluster tests ask, started inside their network namespace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _cluster import loopback_only
from _llama import slots_one_thread

from jevper.servers import SpawnedServer
from jevper.servers.llamacpp import spawn_llamacpp

SLOTS = 4


@pytest.fixture(scope="session")
def cluster_llama() -> Iterator[SpawnedServer]:
    """The embedded llama.cpp inside the namespace: four slots on one thread (tests/_llama.py)."""
    loopback_only()
    with spawn_llamacpp(extra_args=slots_one_thread(SLOTS)) as server:
        yield server
