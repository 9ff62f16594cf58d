"""The fault server the batch tests share (instant, healthy answers), started once per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jevper.testing.faults import FaultServer, running


@pytest.fixture(scope="module")
def faults() -> Iterator[FaultServer]:
    with running() as server:
        yield server
