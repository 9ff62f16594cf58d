"""The fault server, started once per module on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jevper.testing.faults import FaultServer, running


@pytest.fixture(scope="module")
def faults() -> Iterator[FaultServer]:
    with running() as server:
        yield server
