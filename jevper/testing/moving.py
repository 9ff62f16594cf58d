"""A loopback server whose answers move on purpose: under load, on a cache hit, or with a question's position.

It answers every route the fault server does (Chat Completions, Responses, Messages, System One, OpenAI's
Decisions, GET /v1/models) with the fault server's healthy bodies, and moves an answer only where its
`moves` say so:

- ``load``: an answer given while another request was in flight puts its mass elsewhere;
- ``cache``: the second sight of a request body (a prompt-cache hit) does; a body with
  ``cache_prompt: false`` is never cached, as llama.cpp's switch says;
- ``position``: each System One or Decisions question's answer depends on where it stands among the
  questions (the second question's distribution rotated one place, the third's two).

A moved prompt-surface answer shifts its label logprobs (A less likely, B more), or changes its text
where it carries none (Messages); a moved System One or Decisions answer trades its first two options'
shares. Everything else is answered alike, bit for bit, so the stability probes grade `moves` exactly
where a move was made. Under ``load``, a request of a wave (the probe runner's ``x-jevper-wave`` header,
the wave's size) is held until the whole wave has arrived, so requests sent together meet; a request sent
alone is answered at once.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from jevper._wire import PROMPT_RECORDS, RECORDS, decisions, prompt_record
from jevper.testing.bodies import HEALTHY_LOGPROBS, Answer, entry
from jevper.testing.decisions import DecisionsAnswer
from jevper.testing.loopback import LoopbackServer, request_headers
from jevper.testing.systemone import HEALTHY_NOUL, SystemOneAnswer

Move = Literal["load", "cache", "position"]
MOVES: tuple[Move, ...] = ("load", "cache", "position")
#: The header the probe runner marks each request of a wave with (the wave's size); the runner's own
#: WAVE_HEADER, which a test holds equal to this one (jevper.testing imports nothing of the harness).
WAVE_HEADER = "x-jevper-wave"
#: How long a request of a wave waits for the rest of it before it is answered anyway.
WAVE_WAIT_S = 10.0
#: A moved label answer: A still first, but much less sure (0.61 against 0.82).
MOVED_LOGPROBS: tuple[tuple[str, float], ...] = (("A", -0.5), ("B", -1.1), ("C", -3.4))
_ROUTES = {f"/v1/{r.route}": r.name for r in RECORDS.values()} | {f"/v1/{decisions.ROUTE}": decisions.SURFACE}


class MovingServer:
    """The server on a free loopback port; `moves` names what moves an answer (none: nothing does)."""

    def __init__(self, *moves: Move, model: str = "moving-model") -> None:
        unknown = [m for m in moves if m not in MOVES]
        if unknown:
            raise ValueError(f"expected moves among {MOVES}, got {unknown}")
        self.moves = frozenset(moves)
        self.model = model
        self._lock = threading.Lock()
        self._wave = threading.Condition()
        self._gathered = 0  # the requests of the wave now gathering that have arrived
        self._waves = 0  # the waves gathered so far
        self._in_flight: set[int] = set()
        self._overlapped: set[int] = set()
        self._seen: set[str] = set()
        self._next = 0
        self.moved: list[str] = []  # the path of every answer moved, in order (for tests)
        self._http = LoopbackServer(self._route, "moving-server")

    @property
    def base_url(self) -> str:
        return self._http.base_url

    def start(self) -> MovingServer:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    def _route(self, method: str, path: str, request: Any, size: int) -> tuple[int, Any]:
        if method == "GET" and path.rstrip("/").endswith("/models"):
            return 200, {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "owned_by": "jevper"}],
            }
        if method != "POST":
            return 404, {"error": {"message": f"no route {path}", "code": 404}}
        return self.answer(path, request)

    # --- one request --------------------------------------------------------------------------------

    def answer(self, path: str, request: Any) -> tuple[int, dict[str, Any]]:
        surface = _ROUTES.get(path.rstrip("/"))
        if surface is None:
            return 404, {"error": {"message": f"no route {path}", "type": "not_found_error", "code": 404}}
        ticket = self._arrive()
        try:
            if "load" in self.moves:
                self._gather(_wave_size())
            moved = self._moved(ticket, request)
        finally:
            self._leave(ticket)
        model = request.get("model") if isinstance(request, Mapping) else None
        named = model if isinstance(model, str) else self.model
        if moved:
            self.moved.append(path)
        if surface in PROMPT_RECORDS:
            return 200, _prompt_answer(Answer(prompt_record(surface).name, request, named), moved)
        native: DecisionsAnswer | SystemOneAnswer
        shares: list[dict[str, Any]]
        if surface == decisions.SURFACE:
            native = DecisionsAnswer(request, named)
            shares = list(native.answers)
        else:
            native = SystemOneAnswer(request, named)
            shares = list(native.answers.values())
        for position, answer in enumerate(shares):
            turns = (1 if moved else 0) + (position if "position" in self.moves else 0)
            _shift(answer, turns)
        return 200, native.body()

    def _arrive(self) -> int:
        with self._lock:
            self._next += 1
            ticket = self._next
            if self._in_flight:
                self._overlapped |= {ticket, *self._in_flight}
            self._in_flight.add(ticket)
            return ticket

    def _gather(self, size: int) -> None:
        """Hold a request of a wave of `size` until the wave's last request has arrived (each arrived one
        is in flight, so they all overlap); at once for a request sent alone."""
        if size < 2:
            return
        with self._wave:
            wave = self._waves
            self._gathered += 1
            if self._gathered < size and self._wave.wait_for(lambda: self._waves != wave, WAVE_WAIT_S):
                return
            if self._waves == wave:  # the last to arrive (or one that waited in vain) releases the wave
                self._gathered = 0
                self._waves += 1
                self._wave.notify_all()

    def _leave(self, ticket: int) -> None:
        with self._lock:
            self._in_flight.discard(ticket)

    def _moved(self, ticket: int, request: Any) -> bool:
        with self._lock:
            under_load = "load" in self.moves and ticket in self._overlapped
            self._overlapped.discard(ticket)
            cached = False
            if "cache" in self.moves and not (
                isinstance(request, Mapping) and request.get("cache_prompt") is False
            ):
                key = json.dumps(request, sort_keys=True)
                cached = key in self._seen
                self._seen.add(key)
            return under_load or cached


def _wave_size() -> int:
    try:
        return int(request_headers().get(WAVE_HEADER, "1"))
    except ValueError:
        return 1


def _prompt_answer(answer: Answer, moved: bool) -> dict[str, Any]:
    if moved:
        if answer.logprobs is not None:
            token, logprob = MOVED_LOGPROBS[0]
            answer.logprobs = [entry(token, logprob, MOVED_LOGPROBS)]
        else:
            answer.text = answer.text.replace("A", "B")
    return answer.body()


def _shift(answer: dict[str, Any], turns: int) -> None:
    """Move a System One or Decisions answer's mass `turns` places: its shares rotated, a choice's pick
    with them (a noul's or a predicate's probability of true lowered)."""
    if turns == 0:
        return
    shares = answer.get("probabilities")
    if isinstance(shares, dict) and len(shares) > 1:
        keys, values = list(shares), list(shares.values())
        turned = values[-turns % len(values) :] + values[: -turns % len(values)]
        answer["probabilities"] = dict(zip(keys, turned, strict=True))
        if answer.get("type") == "choice":
            answer["choice"] = keys[turned.index(max(turned))]
    elif isinstance(shares, list) and len(shares) > 1:
        values = [s["probability"] for s in shares]
        turned = values[-turns % len(values) :] + values[: -turns % len(values)]
        for share, value in zip(shares, turned, strict=True):
            share["probability"] = value
        if answer.get("type") == "choice":
            answer["choice"] = shares[turned.index(max(turned))]["value"]
    elif "noul" in answer:
        answer["noul"] = round(HEALTHY_NOUL - 0.3 * min(turns, 2), 6)
    elif "probability" in answer:
        answer["probability"] = round(HEALTHY_NOUL - 0.3 * min(turns, 2), 6)


@contextlib.contextmanager
def running(*moves: Move, model: str = "moving-model") -> Iterator[MovingServer]:
    """A moving server for the duration of the block."""
    server = MovingServer(*moves, model=model).start()
    try:
        yield server
    finally:
        server.stop()


__all__ = ["HEALTHY_LOGPROBS", "MOVED_LOGPROBS", "MOVES", "WAVE_HEADER", "Move", "MovingServer", "running"]
