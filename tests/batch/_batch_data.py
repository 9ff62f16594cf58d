"""What the batch tests ask and count (a plain module: a conftest's name is taken by every test folder)."""

from __future__ import annotations

from typing import Any

from jevper.testing.faults import FaultServer

#: Three questions, one of each type, in the System One API's shape.
QUESTIONS: dict[str, Any] = {
    "topic": {"type": "choice", "criteria": {"billing": "about a charge", "other": "anything else"}},
    "urgent": {"type": "noul", "instructions": "Does the writer need an answer today?"},
    "anger": {"type": "score", "criteria": ["calm", "annoyed", "furious"]},
}


def posts(server: FaultServer) -> int:
    """The answers (and faults) a fault server served on its surface routes."""
    return sum(1 for served in server.log if served.method == "POST")
