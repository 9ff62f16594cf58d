"""What a call did, for ``response.debug``: one typed value that both ways of answering fill in (the prompt
surfaces, question by question, and System One, all questions in one request) and turn into the mapping
the public response carries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: What ``debug`` shows in place of a header's value.
REDACTED = "<redacted>"


@dataclass(frozen=True)
class Prefill:
    """The answer opening sent on the Messages surface, and how each reply treated it."""

    sent: str
    replies: tuple[str, ...]


@dataclass(frozen=True)
class QuestionTrace:
    """How one question was answered: its method and surface, the requests it took, and why."""

    method: str
    surface: str
    requests: int
    why: tuple[str, ...]
    prefill: Prefill | None = None

    def to_dict(self) -> dict[str, Any]:
        prefill = (
            None
            if self.prefill is None
            else {"sent": self.prefill.sent, "replies": list(self.prefill.replies)}
        )
        return {
            "method": self.method,
            "surface": self.surface,
            "requests": self.requests,
            "why": list(self.why),
            "prefill": prefill,
        }


@dataclass(frozen=True)
class Route:
    """api="auto": the surface the model is asked on and why, and what the model list said of it."""

    surface: str
    why: str
    discovery: str | None = None

    def to_dict(self) -> dict[str, Any]:
        route = {"surface": self.surface, "why": self.why}
        if self.discovery is not None:
            route["discovery"] = self.discovery
        return route


@dataclass(frozen=True)
class Trace:
    """The whole call: each question's trace in order, the server limits met, and the route (api="auto")."""

    questions: Mapping[str, QuestionTrace]
    server_limits: Mapping[str, str]
    route: Route | None = None
    #: the names of the caller's extra_headers, sent on every request; their values are never shown
    headers: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        debug: dict[str, Any] = {
            "questions": {qid: trace.to_dict() for qid, trace in self.questions.items()},
            "server_limits": dict(self.server_limits),
        }
        if self.route is not None:
            debug["route"] = self.route.to_dict()
        if self.headers:
            debug["extra_headers"] = dict.fromkeys(self.headers, REDACTED)
        return debug


def each(qids: Sequence[str], trace: QuestionTrace) -> dict[str, QuestionTrace]:
    """The same trace for every question (one System One request answers them all)."""
    return dict.fromkeys(qids, trace)
