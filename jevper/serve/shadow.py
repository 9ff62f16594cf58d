"""Shadow traffic: every answered System One or Decisions request asked again of a candidate upstream,
afterwards.

The gateway hands each answered request to ``Shadow.offer`` once its response has gone out (a Starlette
background task), which only puts it on a queue of ``--shadow-queue`` places and never waits: a full
queue drops the request and counts it. A few workers of the shadow's own (its own client, its own pool of
``--concurrency`` requests) ask the candidate and compare its answers with those the client received,
question by question: the same choice (the most probable option of each) and the total variation distance
between the two distributions (half the sum of the absolute differences, 0 for the same numbers, 1 for
distributions with nothing in common). A Decisions question is named by its ``name``, else by its place
(``questions[2]``); a predicate's distribution is its true and false, and a refusal on one side only is a
changed answer at distance 1. A shadow that is slow, hangs or fails holds only its own workers;
its failures are counted and logged, never answered to a client.

What it finds goes to ``/metrics`` aggregated by route and question type (a question's id is the client's
own text: labelled by it, the series would grow with the traffic, and /metrics asks no key), and to
``report()``, served at ``GET /v1/shadow``, per question id (at most ``MAX_QUESTIONS`` ids, the rest
together).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jevper import AsyncSystemOneClient
from jevper._failure import redacted_url
from jevper.decisions import DecisionPredicate, DecisionRefusal, DecisionResponse
from jevper.models import SystemOneResponse
from jevper.serve.observe import Metrics

log = logging.getLogger("jevper.serve.shadow")

#: Question ids the report keeps apart; any further id is counted under OTHER (the memory stays bounded).
MAX_QUESTIONS = 256
OTHER = "(other questions)"
REPORT_KIND = "jevper.serve.shadow"
REPORT_VERSION = 1

Answered = SystemOneResponse | DecisionResponse
Ask = Callable[[AsyncSystemOneClient], Awaitable[Answered]]


@dataclass
class Agreement:
    """How one question's answers compared, over every request compared."""

    type: str
    compared: int = 0
    agreed: int = 0
    distance_sum: float = 0.0
    distance_max: float = 0.0

    def add(self, same: bool, distance: float) -> None:
        self.compared += 1
        self.agreed += same
        self.distance_sum += distance
        self.distance_max = max(self.distance_max, distance)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "compared": self.compared,
            "agreed": self.agreed,
            "changed": self.compared - self.agreed,
            "agreement": round(self.agreed / self.compared, 6) if self.compared else None,
            "mean_distance": round(self.distance_sum / self.compared, 6) if self.compared else None,
            "max_distance": round(self.distance_max, 6),
        }


@dataclass(frozen=True)
class _Offered:
    route: str
    ask: Ask
    answered: Answered


def per_question(answered: Answered) -> dict[str, tuple[str, Mapping[str, float] | None]]:
    """Each question's type and distribution (None for a refusal), by question id."""
    if isinstance(answered, SystemOneResponse):
        return {
            str(qid): (a.type, {str(k): p for k, p in a.probabilities.items()})
            for qid, a in answered.answers.items()
        }
    found: dict[str, tuple[str, Mapping[str, float] | None]] = {}
    for at, a in enumerate(answered.answers):
        qid = a.name if a.name is not None else f"questions[{at}]"
        if isinstance(a, DecisionRefusal):
            found[qid] = (a.type, None)
        elif isinstance(a, DecisionPredicate):
            found[qid] = (a.type, {"true": a.probability, "false": 1.0 - a.probability})
        else:
            found[qid] = (a.type, {str(p.value): p.probability for p in a.probabilities})
    return found


def most_probable(probabilities: Mapping[Any, float]) -> str | None:
    """The option with the highest probability, as text (None for an empty distribution)."""
    if not probabilities:
        return None
    return str(max(probabilities.items(), key=lambda item: item[1])[0])


def total_variation(p: Mapping[Any, float], q: Mapping[Any, float]) -> float:
    """Half the sum of |p - q| over every option either names: 0 when equal, 1 when disjoint."""
    left = {str(k): v for k, v in p.items()}
    right = {str(k): v for k, v in q.items()}
    return 0.5 * sum(abs(left.get(k, 0.0) - right.get(k, 0.0)) for k in left.keys() | right.keys())


@dataclass
class Shadow:
    """The candidate upstream, its bounded queue and its workers (started by ``start``, stopped by
    ``aclose``)."""

    client: AsyncSystemOneClient
    url: str
    model: str
    metrics: Metrics
    capacity: int = 100
    workers: int = 4
    offered: int = 0
    answered: int = 0
    failed: int = 0
    dropped: int = 0
    asking: int = 0
    questions: dict[str, Agreement] = field(default_factory=dict)
    _queue: asyncio.Queue[_Offered] | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        self._queue = asyncio.Queue(self.capacity)
        self._tasks = [asyncio.create_task(self._work()) for _ in range(self.workers)]

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def offer(self, route: str, ask: Ask, answered: Answered) -> None:
        """Queue a request to ask the shadow, or drop it (counted) when the queue is full. Never waits."""
        self.offered += 1
        queue = self._queue
        try:
            if queue is None:
                raise asyncio.QueueFull
            queue.put_nowait(_Offered(route, ask, answered))
        except asyncio.QueueFull:
            self.dropped += 1
            self.metrics.shadow_requests.labels(route, "dropped").inc()
            return
        self.metrics.shadow_queue.set(queue.qsize())

    async def _work(self) -> None:
        assert self._queue is not None
        while True:
            offered = await self._queue.get()
            self.metrics.shadow_queue.set(self._queue.qsize())
            self.asking += 1
            try:
                await self._compare(offered)
            finally:
                self.asking -= 1

    async def _compare(self, offered: _Offered) -> None:
        try:
            candidate = await offered.ask(self.client)
        except asyncio.CancelledError:
            raise
        except Exception as failed:  # the shadow's failure is counted and logged, never a client's
            self.failed += 1
            self.metrics.shadow_requests.labels(offered.route, "failed").inc()
            log.warning("shadow %s failed: %s: %s", redacted_url(self.url), type(failed).__name__, failed)
            return
        self.answered += 1
        self.metrics.shadow_requests.labels(offered.route, "answered").inc()
        theirs = per_question(candidate)
        for qid, (kind, main) in per_question(offered.answered).items():
            if qid not in theirs:
                continue
            other = theirs[qid][1]
            if main is None or other is None:  # a refusal: the same only when both refused
                same = main is None and other is None
                distance = 0.0 if same else 1.0
            else:
                same = most_probable(main) == most_probable(other)
                distance = total_variation(main, other)
            key = qid if qid in self.questions or len(self.questions) < MAX_QUESTIONS else OTHER
            self.questions.setdefault(key, Agreement(kind)).add(same, distance)
            self.metrics.shadow_answers.labels(offered.route, kind, str(same).lower()).inc()
            self.metrics.shadow_distance.labels(offered.route, kind).observe(distance)

    def report(self) -> dict[str, Any]:
        """What the shadow found so far, per question id, for an operator (GET /v1/shadow)."""
        waiting = self._queue.qsize() if self._queue is not None else 0
        return {
            "kind": REPORT_KIND,
            "version": REPORT_VERSION,
            "shadow": {"url": redacted_url(self.url), "model": self.model},
            "distance": "total variation: half the sum of the absolute differences of the probabilities",
            "requests": {
                "offered": self.offered,
                "answered": self.answered,
                "failed": self.failed,
                "dropped": self.dropped,
                "waiting": waiting,
                "asking": self.asking,
            },
            "queue": {"capacity": self.capacity, "workers": self.workers},
            "questions": {qid: agreement.to_json() for qid, agreement in self.questions.items()},
        }
