"""Questions and servers the batch tests share: the fault server (instant, scripted or faulty)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jevper.testing.faults import FaultServer, running

#: Three questions, one of each type, in the System One API's shape.
QUESTIONS: dict[str, Any] = {
    "topic": {"type": "choice", "criteria": {"billing": "about a charge", "other": "anything else"}},
    "urgent": {"type": "noul", "instructions": "Does the writer need an answer today?"},
    "anger": {"type": "score", "criteria": ["calm", "annoyed", "furious"]},
}


@pytest.fixture(scope="module")
def faults() -> Iterator[FaultServer]:
    with running() as server:
        yield server


def posts(server: FaultServer) -> int:
    """The answers (and faults) a fault server served on its surface routes."""
    return sum(1 for served in server.log if served.method == "POST")
