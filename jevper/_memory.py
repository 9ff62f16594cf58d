"""What a client has learnt about its server, per model and surface, and why.

Shared by every call of one client (and by threads of the blocking client), so writes take a lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from jevper._wire import PROMPT_RECORDS, PromptSurface, chat, responses, systemone

#: api="auto" starts here: the surface that can carry logprobs, schemas and reasoning items alike.
PREFERRED_SURFACE: PromptSurface = responses.SURFACE
#: api="auto" moves a model here when its surface cannot carry what was asked: the surface every
#: OpenAI-style server has.
FALLBACK_SURFACE: PromptSurface = chat.SURFACE
#: api="auto", per model: System One answers it, or the prompt surfaces do.
NATIVE, PROMPT = systemone.SURFACE, "prompt surfaces"


@dataclass(frozen=True)
class Note:
    value: str
    why: str


@dataclass
class Memory:
    routes: dict[str, Note] = field(default_factory=dict)  # model -> surface api="auto" uses
    verdicts: dict[tuple[str, PromptSurface], Note] = field(
        default_factory=dict
    )  # -> "logprobs" | "structured"
    limits: dict[tuple[str, PromptSurface], dict[str, str]] = field(
        default_factory=dict
    )  # refused field -> why
    # method="auto": where structured JSON could not be read, discrete (one option) answers instead
    one_hot: dict[tuple[str, PromptSurface], Note] = field(default_factory=dict)
    # api="auto": model -> NATIVE (System One answers it) or PROMPT (the prompt surfaces do), and why
    native: dict[str, Note] = field(default_factory=dict)
    # api="auto": model -> how many GET /models failed without an answer (a timeout, a 503), and the last
    # one's why; never settled, so a later call asks again
    unanswered: dict[str, tuple[int, Note]] = field(default_factory=dict)
    # the label grammar held here: a reply of exactly one label, ended by the grammar, with no trace
    held: set[tuple[str, PromptSurface]] = field(default_factory=set)
    # api="auto", decisions.create: model -> "decisions" (the server's POST /v1/decisions answers it) or
    # PROMPT (it has no such route, or answers it in another shape), and why
    decisions: dict[str, Note] = field(default_factory=dict)
    # api="auto": why the server has no POST /api/show (Ollama's model information), once it said so; no
    # later model asks it there
    no_show_route: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def route(self, model: str) -> PromptSurface:
        note = self.routes.get(model)
        return PREFERRED_SURFACE if note is None else _surface(note.value)

    def move(self, model: str, surface: PromptSurface, why: str) -> None:
        with self._lock:
            self.routes[model] = Note(surface, why)

    def verdict(self, model: str, surface: PromptSurface) -> Note | None:
        return self.verdicts.get((model, surface))

    def judge(self, model: str, surface: PromptSurface, verdict: str, why: str) -> None:
        """Remember a verdict; "structured" (no distribution here) overrides an earlier success."""
        with self._lock:
            if verdict == "structured" or (model, surface) not in self.verdicts:
                self.verdicts[(model, surface)] = Note(verdict, why)

    def discrete(self, model: str, surface: PromptSurface) -> Note | None:
        return self.one_hot.get((model, surface))

    def fall_back(self, model: str, surface: PromptSurface, why: str) -> None:
        with self._lock:
            self.one_hot[(model, surface)] = Note("discrete", why)

    def omitted(self, model: str, surface: PromptSurface) -> frozenset[str]:
        return frozenset(self.limits.get((model, surface), ()))

    def limit(self, model: str, surface: PromptSurface, name: str, why: str) -> None:
        with self._lock:
            self.limits.setdefault((model, surface), {})[name] = why

    def grammar_held(self, model: str, surface: PromptSurface) -> bool:
        return (model, surface) in self.held

    def hold(self, model: str, surface: PromptSurface) -> None:
        with self._lock:
            self.held.add((model, surface))

    def native_route(self, model: str) -> Note | None:
        return self.native.get(model)

    def settle(self, model: str, value: str, why: str) -> None:
        with self._lock:
            self.native[model] = Note(value, why)

    def failed_discoveries(self, model: str) -> int:
        """How many times the model list failed to answer for ``model`` so far."""
        return self.unanswered.get(model, (0, None))[0]

    def discovery_failed(self, model: str, why: str) -> Note:
        """Note a model list that failed to answer: this call goes to the prompt surfaces, a later one asks
        again."""
        with self._lock:
            count = self.unanswered.get(model, (0, None))[0] + 1
            note = Note(PROMPT, why)
            self.unanswered[model] = (count, note)
        return note

    def discovery(self, model: str) -> Note | None:
        """What api="auto" last learnt about ``model`` from the model list: its answer, else the last
        failure to get one."""
        settled = self.native.get(model)
        if settled is not None:
            return settled
        failed = self.unanswered.get(model)
        return None if failed is None else failed[1]

    def decisions_route(self, model: str) -> Note | None:
        return self.decisions.get(model)

    def settle_decisions(self, model: str, value: str, why: str) -> None:
        with self._lock:
            self.decisions[model] = Note(value, why)

    def server_limits(self, model: str, surface: PromptSurface) -> dict[str, str]:
        return dict(self.limits.get((model, surface), {}))


def _surface(value: str) -> PromptSurface:
    for name in PROMPT_RECORDS:
        if name == value:
            return name
    return PREFERRED_SURFACE
