"""The fault server in front of which the offline gateway tests run, started once per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jevper.testing.faults import FaultServer, running


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultServer]:
    with running(model="smollm2") as server:
        yield server
