"""The blocking client's questions of one call: asked in order on the caller's thread while the server
answers them at once, spread over the client's threads as soon as one waits on the server.

Threads pay off only where requests wait. Against a server that answers in less time than the client
spends on a request, every thread is busy in the interpreter and they contend for its lock instead
(``scripts/bench client``), while a server with several slots answers waiting questions side by side.
So the caller's thread asks first, and the call's other questions start on the client's pool as soon
as a question has waited on the server longer than the client worked on it, or is still unanswered
after ``FAN_OUT_AFTER_S``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from contextvars import copy_context
from typing import Generic, TypeVar

T = TypeVar("T")
Item = TypeVar("Item")

#: How long one question may run on the caller's thread before the call's other questions start on
#: the client's threads.
FAN_OUT_AFTER_S = 0.005
#: A question that waited longer than this many times the caller's own work on it starts the others.
WAITED_OVER_WORKED = 1.0
#: After a call whose questions waited, this many calls start all their questions at once (waiting for
#: the first one cost a four-slot llama.cpp a tenth of an 8-question call); then one looks again.
AT_ONCE_CALLS = 16


class Pace:
    """One client's memory of its server: whether its next call starts every question at once."""

    def __init__(self) -> None:
        self._at_once = 0  # calls left that start every question at once

    def at_once(self) -> bool:
        return self._at_once > 0

    def record(self, at_once: bool, spread: bool) -> None:
        # Concurrent calls may race here: the worst is one call more or fewer in either mode.
        if at_once:
            self._at_once = max(0, self._at_once - 1)
        elif spread:
            self._at_once = AT_ONCE_CALLS


def spread(
    pool: Callable[[], Executor],
    items: Sequence[Item],
    work: Callable[[Item], T],
    workers: int,
    pace: Pace | None = None,
) -> list[T]:
    """``work`` for every item, the results in the items' order; at most ``workers`` at a time: on the
    caller's thread, and on ``pool()``'s threads once one has waited on the server (see the module), or
    at once when ``pace`` says so. After a failure no item starts; the first failure in the items'
    order is raised once the running ones end."""
    if workers <= 1 or len(items) <= 1:
        return [work(item) for item in items]
    call = _Call(items, work, workers)
    call.pool = pool()
    at_once = pace is not None and pace.at_once()
    if at_once:
        call.spread_rest(workers - 1)
    else:
        call.pool.submit(copy_context().run, call.watch, FAN_OUT_AFTER_S)
    try:
        call.drain(by_caller=True)
        call.ended.wait()
    except BaseException:  # interrupted while waiting: nothing more starts, the running ones end first
        call.stop()
        call.ended.wait()
        raise
    if pace is not None:
        pace.record(at_once, call.spread)
    if call.failures:
        raise call.failures[min(call.failures)]
    return call.results  # type: ignore[return-value]  # every item answered


class _Call(Generic[Item, T]):
    """One call's items: the next to start, what each returned or raised, how many are running."""

    def __init__(self, items: Sequence[Item], work: Callable[[Item], T], workers: int) -> None:
        self.items = items
        self.work = work
        self.workers = workers
        self.pool: Executor | None = None  # None: the caller's thread alone
        self.results: list[T | None] = [None] * len(items)
        self.failures: dict[int, BaseException] = {}
        self.ended = threading.Event()  # every item answered, or a failure and nothing running
        self._lock = threading.Lock()
        self._next = 0
        self._running = 0
        self._stopped = False
        self.spread = False
        self._asked_at = time.monotonic()  # when the caller's thread started its current item

    def drain(self, by_caller: bool = False) -> None:
        """Start items until none is left (or one failed), one after another on this thread; the
        caller's thread spreads the rest once an item waited longer than it worked."""
        while (index := self._take(by_caller)) is not None:
            if by_caller and not self.spread:
                wall, worked = time.perf_counter(), time.thread_time()
            try:
                self.results[index] = self.work(self.items[index])
            except BaseException as error:  # raised by spread() in the caller's thread
                self._done(index, error)
            else:
                self._done(index, None)
            if by_caller and not self.spread:
                worked = time.thread_time() - worked
                if time.perf_counter() - wall - worked > WAITED_OVER_WORKED * worked:
                    self.spread_rest(self.workers - 1)

    def watch(self, after: float) -> None:
        """On a pool thread: once the caller's current item has run ``after`` seconds, start the others
        here and on as many more of the pool's threads as the call may use."""
        while True:
            with self._lock:
                asked_at, spread = self._asked_at, self.spread
            if spread:
                return
            left = asked_at + after - time.monotonic()
            if left > 0:
                if self.ended.wait(left):
                    return
                continue
            if self.spread_rest(self.workers - 2):
                self.drain()
            return

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._running == 0:
                self.ended.set()

    def spread_rest(self, threads: int) -> bool:
        """Start ``threads`` more drains on the pool, once per call; False when already done."""
        with self._lock:
            if self.spread or self.pool is None:
                return False
            self.spread = True
        for _ in range(threads):
            self.pool.submit(copy_context().run, self.drain)
        return True

    def _take(self, by_caller: bool) -> int | None:
        with self._lock:
            if self._stopped or self.failures or self._next >= len(self.items):
                return None
            index = self._next
            self._next += 1
            self._running += 1
            if by_caller:
                self._asked_at = time.monotonic()
            return index

    def _done(self, index: int, error: BaseException | None) -> None:
        with self._lock:
            if error is not None:
                self.failures[index] = error
            self._running -= 1
            if self._running == 0 and (self._stopped or self.failures or self._next >= len(self.items)):
                self.ended.set()
