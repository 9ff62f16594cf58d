"""Token usage summed over every request of one call, from whichever path each response used."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from contextvars import ContextVar

from jevper._wire import WireResult
from jevper.models import SystemOneResponse, Usage


def total(results: Iterable[WireResult]) -> Usage:
    """The sums, each None when a response did not report that count (a part is not the whole); the
    requests counted as ``n_calls``. One pass over the responses."""
    input_tokens: int | None = 0
    output_tokens: int | None = 0
    reasoning: int | None = 0
    cached: int | None = 0
    calls = 0
    for result in results:
        calls += 1
        usage = result.usage
        input_tokens = _plus(input_tokens, usage.prompt_tokens)
        output_tokens = _plus(output_tokens, usage.completion_tokens)
        reasoning = _plus(reasoning, usage.reasoning_tokens)
        cached = _plus(cached, usage.cached_tokens)
    if calls == 0:
        return Usage()
    return Usage(input_tokens, output_tokens, reasoning, cached, n_calls=calls)


def _plus(sum_so_far: int | None, count: int | None) -> int | None:
    return None if sum_so_far is None or count is None else sum_so_far + count


def plus(a: Usage, b: Usage) -> Usage:
    """Two calls' usage summed (an escalated call and its second server's); a count either did not
    report stays None."""
    return Usage(
        _plus(a.input_tokens, b.input_tokens),
        _plus(a.output_tokens, b.output_tokens),
        _plus(a.reasoning_tokens, b.reasoning_tokens),
        _plus(a.cached_tokens, b.cached_tokens),
        a.n_calls + b.n_calls,
        a.n_retries + b.n_retries,
        a.latency + b.latency,
    )


class Tally:
    """What a call's requests did that their responses do not say: the retries the transport made; and
    when the call began."""

    __slots__ = ("_lock", "retries", "started")

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.retries = 0
        self._lock = threading.Lock()

    def retried(self) -> None:
        with self._lock:  # the blocking client's questions retry on several threads
            self.retries += 1

    def stamped(self, response: SystemOneResponse) -> SystemOneResponse:
        """The response with the call's retries and wall time in its usage (built directly: a call's
        two ``dataclasses.replace`` cost 8 µs, more than the rest of this bookkeeping)."""
        u = response.usage
        latency = time.perf_counter() - self.started
        usage = Usage(
            u.input_tokens,
            u.output_tokens,
            u.reasoning_tokens,
            u.cached_tokens,
            u.n_calls,
            self.retries,
            latency,
        )
        return SystemOneResponse(response.answers, usage, response.reasoning, response.debug, response.model)


#: The call the current request belongs to: set by the clients around a call; the async client's tasks
#: inherit it, and the blocking client hands each worker thread a copy of the caller's context.
CALL: ContextVar[Tally | None] = ContextVar("jevper_call", default=None)


def retried() -> None:
    """Count one retry against the current call, if any (the gateway's and the batch's clients too)."""
    tally = CALL.get()
    if tally is not None:
        tally.retried()
