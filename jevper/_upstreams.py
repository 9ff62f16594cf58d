"""Several servers behind one pool: each with its own slots, the one with the most room asked first.

One component for everything in jevper that spreads calls over servers (the batch engine's rows, the
gateway's upstreams). Each server is reached through its own ``AsyncSystemOneClient``; the pool only
decides where a call goes and what a failure means for that server::

    pool = Upstreams([Upstream("http://a:8080/v1", "m", slots=4), Upstream("http://b:8080/v1", "m")])
    answer = await pool.ask(lambda client: client.system_one(state=..., questions=...), attempts=4)

What a failure says about the server is the one failure policy's (``jevper._failure``). A server that
is down (refused connection, reset, timeout, a 502, a 5xx in words the wording table does not know) is
taken out for a cool-down that doubles with each failure in a row (``cool_down`` up to
``max_cool_down`` seconds); then it is asked one call at a time until one succeeds. A busy one (a 429,
a 503 with ``Retry-After``) is paused alone for as long as it asked. ``ask`` moves a call the server
failed to another server; any other error (a 400, a 501, llama.cpp's 500 for a request it will not
take, an answer that cannot be read) is the call's own and is raised at once. When every server has
failed ``give_up_after`` times in a row and is out, ``acquire`` raises ``NoUpstreamError`` instead of
waiting (each server's cool-down still ends, and it is asked again after it).

``patience`` rides out a restart: for that many seconds after a server's first failure in a row it is
not given up, and a call that failed for a reason that may pass (a refused connection, a 503) is asked
again after its ``attempts`` are spent (unless that was one), until that long after its own first failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from jevper._errors import ConfigError, ProviderError
from jevper._failure import Failure, judge, redacted_url, server_failure
from jevper.async_client import AsyncSystemOneClient

__all__ = ["Lease", "NoUpstreamError", "Upstream", "UpstreamStatus", "Upstreams", "blame", "server_failure"]

T = TypeVar("T")

#: Where a server's first failure in a row is said while calls wait for it (a script sees it on stderr
#: through Python's last-resort handler when it configures no logging).
logger = logging.getLogger("jevper.upstreams")

#: How long a server that said 429 (or 503) without a Retry-After is left alone.
DEFAULT_PAUSE_S = 1.0


@dataclass(frozen=True)
class Upstream:
    """One server: its base URL (ending in /v1), the model it serves, and its requests in flight at once
    (its slot count; for a call of several questions, the calls in flight)."""

    base_url: str
    model: str
    slots: int = 4
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.base_url, str) or not self.base_url.startswith(("http://", "https://")):
            got = repr(redacted_url(self.base_url)) if isinstance(self.base_url, str) else repr(self.base_url)
            raise ConfigError(
                f"server base_url: expected an http:// or https:// URL ending in /v1, got {got}"
            )
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"server {self.shown}: expected the model id it serves, got {self.model!r}")
        if isinstance(self.slots, bool) or not isinstance(self.slots, int) or self.slots < 1:
            raise ConfigError(
                f"server {self.shown}: expected slots to be an integer of at least 1, got {self.slots!r}"
            )

    @property
    def shown(self) -> str:
        """The base URL as every message names it: without credentials or query values."""
        return redacted_url(self.base_url)


class NoUpstreamError(ProviderError):
    """Every server failed ``give_up_after`` times in a row: none can be reached now."""


@dataclass(frozen=True)
class UpstreamStatus:
    """One server as the pool sees it at a moment (for progress displays and metrics)."""

    base_url: str
    slots: int
    in_flight: int
    succeeded: int
    failed: int
    paused: int  # 429s and 503s it answered
    out_for: float  # seconds until it is asked again; 0 when it is in
    last_error: str | None


def blame(error: BaseException) -> Literal["down", "busy"] | None:
    """What an error says about the server that gave it: ``down`` (take it out), ``busy`` (it asked to
    wait), or None (the call's own error: a 400, a 501, an unreadable answer; another server would do the
    same), as the failure policy judges it. An error raised from a server's failure (``raise ... from``)
    is that failure's.
    """
    return judge(error).server


class _Server:
    def __init__(self, spec: Upstream, client: AsyncSystemOneClient) -> None:
        self.spec = spec
        self.client = client
        self.in_flight = 0
        self.failures = 0  # in a row; reset by a success
        self.failing_since = 0.0  # when the first of them came
        self.out_until = 0.0
        self.succeeded = 0
        self.failed = 0
        self.paused = 0
        self.last_error: str | None = None

    def room(self, now: float) -> int:
        if now < self.out_until:
            return 0
        # A server back from a failure is tried one call at a time until one succeeds.
        limit = 1 if self.failures else self.spec.slots
        return limit - self.in_flight


class Lease:
    """A server held for one call; report how it went with ``succeeded()`` or ``failed(error)``."""

    def __init__(self, pool: Upstreams, server: _Server) -> None:
        self._pool = pool
        self._server = server
        self._open = True

    @property
    def upstream(self) -> Upstream:
        return self._server.spec

    @property
    def client(self) -> AsyncSystemOneClient:
        return self._server.client

    def succeeded(self) -> None:
        self._close(None)

    def failed(self, error: BaseException) -> Failure:
        """Report the call's error; what it says (``server`` set: the call may go to another server)."""
        failure = judge(error)
        self._close((failure.server, error))
        return failure

    def _close(self, outcome: tuple[Literal["down", "busy"] | None, BaseException] | None) -> None:
        if self._open:
            self._open = False
            self._pool._release(self._server, outcome)


class Upstreams:
    """The pool. ``connect`` makes each server's client, once, when the pool is made (no I/O then)."""

    def __init__(
        self,
        upstreams: Sequence[Upstream],
        connect: Callable[[Upstream], AsyncSystemOneClient],
        *,
        cool_down: float = 1.0,
        max_cool_down: float = 30.0,
        give_up_after: int = 3,
        patience: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not upstreams:
            raise ConfigError("servers: expected at least one server (a base URL and its model), got none")
        self._servers = [_Server(spec, connect(spec)) for spec in upstreams]
        self._cool_down, self._max_cool_down = cool_down, max_cool_down
        self._give_up_after = give_up_after
        self._patience = patience
        self._clock = clock
        self._turn = 0
        # Calls waiting for room, each with the servers it passes over; how many pass over some.
        self._waiters: deque[tuple[asyncio.Future[None], frozenset[_Server]]] = deque()
        self._avoiding = 0

    @property
    def slots(self) -> int:
        """The calls all servers take at once when every one is in."""
        return sum(server.spec.slots for server in self._servers)

    def status(self) -> list[UpstreamStatus]:
        now = self._clock()
        return [
            UpstreamStatus(
                s.spec.base_url,
                s.spec.slots,
                s.in_flight,
                s.succeeded,
                s.failed,
                s.paused,
                max(0.0, s.out_until - now),
                s.last_error,
            )
            for s in self._servers
        ]

    async def acquire(self, avoid: frozenset[_Server] = frozenset()) -> Lease:
        """The server with the most room, held for one call; waits while none has room. Servers in
        ``avoid`` (those that failed this call already) are passed over while a healthy one remains."""
        while True:
            server = self._pick(avoid)
            if server is not None:
                server.in_flight += 1
                return Lease(self, server)
            self._check_reachable()
            waiter = asyncio.get_running_loop().create_future()
            entry = (waiter, avoid)
            self._waiters.append(entry)
            self._avoiding += bool(avoid)
            try:
                until = self._until_change()
                if until is None:
                    await waiter
                else:
                    await asyncio.wait_for(waiter, until)
            except TimeoutError:
                pass
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake(1)  # woken for a slot and cancelled: the slot goes to the next waiter
                raise
            finally:
                if not waiter.done() or waiter.cancelled():  # not woken: still in the queue
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(entry)
                        self._avoiding -= bool(avoid)

    async def ask(self, call: Callable[[AsyncSystemOneClient], Awaitable[T]], *, attempts: int = 3) -> T:
        """``call`` on the server with the most room; again on another (up to ``attempts`` in all) while
        the error is the server's, and past them within the pool's ``patience`` while it may pass. The
        call's own errors, and the last server's, are raised."""
        tried = 0
        first_failure: float | None = None
        # A server that failed this call is not asked it again while a healthy one remains: a server
        # killed mid-run comes back on trial after its cool-down and would fail the same call twice.
        failed_here: set[_Server] = set()
        while True:
            held = await self.acquire(frozenset(failed_here))
            try:
                result = await call(held.client)
            except asyncio.CancelledError:
                held._close(None)
                raise
            except Exception as error:
                tried += 1
                failure = held.failed(error)
                if failure.server is None:
                    raise
                now = self._clock()
                first_failure = now if first_failure is None else first_failure
                # Past its attempts, a call that may be asked again at all waits out a failure that may pass.
                patient = attempts > 1 and failure.retry and failure.wait is not None
                if tried >= attempts and not (patient and now - first_failure < self._patience):
                    raise
                failed_here.add(held._server)
                continue
            held.succeeded()
            return result

    def failing(self) -> list[Upstream]:
        """The servers that failed last time they were asked: out, or back on trial one call at a time.
        A check of the caller's own (the gateway's, in the background) may ``restore`` them."""
        return [server.spec for server in self._servers if server.failures]

    def restore(self, base_url: str) -> None:
        """A check outside the pool found the server answering: it is in again, with all its slots."""
        for server in self._servers:
            if server.spec.base_url == base_url:
                server.failures, server.out_until = 0, 0.0
        self._wake()

    def take_out(self, base_url: str, error: BaseException) -> None:
        """A check outside the pool found the server down (``error`` says how): it is out as after a
        failed call, for its cool-down, and asked again one call at a time, until a call succeeds or a
        check ``restore``s it."""
        for server in self._servers:
            if server.spec.base_url == base_url:
                server.in_flight += 1  # released at once, as a call that failed
                self._release(server, ("down", error))

    async def aclose(self) -> None:
        """Close every server's client (its SDK's connections)."""
        for server in self._servers:
            sdk = getattr(server.client, "_client", None)
            closing = getattr(sdk, "close", None)
            if callable(closing):
                with contextlib.suppress(Exception):
                    done = closing()
                    if asyncio.iscoroutine(done):
                        await done

    # --- the bookkeeping ------------------------------------------------------------------------------

    def _pick(self, avoid: frozenset[_Server] = frozenset()) -> _Server | None:
        now = self._clock()
        best: _Server | None = None
        best_room = 0
        count = len(self._servers)
        if avoid and not any(s.failures == 0 for s in self._servers if s not in avoid):
            avoid = frozenset()
        # Ties go round the servers, so equal servers share the calls evenly.
        for i in range(count):
            server = self._servers[(self._turn + i) % count]
            if server in avoid:
                continue
            room = server.room(now)
            if room > best_room:
                best, best_room = server, room
        if best is not None:
            self._turn = (self._servers.index(best) + 1) % count
        return best

    def _release(
        self, server: _Server, outcome: tuple[Literal["down", "busy"] | None, BaseException] | None
    ) -> None:
        server.in_flight -= 1
        said = outcome[0] if outcome is not None else None
        if outcome is None or said is None:
            if outcome is None:
                server.succeeded += 1
            back = server.failures > 0  # on trial until now: all its slots are free again
            server.failures = 0
            # One slot came free: one waiter takes it. Every waiter looks again where more came free or
            # where a waiter passes over some servers (it may not take this one). Waking every waiter at
            # each release cost a batch's rows twice the CPU with 8 batches waiting on 8 slots (a Ray actor).
            self._wake(None if back or self._avoiding else 1)
            return
        error = outcome[1]
        server.last_error = f"{type(error).__name__}: {error}"
        now = self._clock()
        if said == "busy":
            server.paused += 1
            wait = getattr(server_failure(error) or error, "retry_after", None)
            server.out_until = max(server.out_until, now + (wait if wait is not None else DEFAULT_PAUSE_S))
        else:
            server.failed += 1
            # Calls that were in flight together and fail together are one failure, not several.
            if now >= server.out_until:
                if not server.failures:
                    server.failing_since = now
                    self._say_waiting(server)
                server.failures += 1
                wait = min(self._cool_down * 2 ** (server.failures - 1), self._max_cool_down)
                server.out_until = now + wait
        # A failure may leave no server to wait for: every waiter looks again.
        self._wake()

    def _say_waiting(self, server: _Server) -> None:
        """With patience, calls wait for a failing server rather than fail: said at once, not after it."""
        if self._patience > 0:
            logger.warning(
                "%s: %s; calls wait up to %g s for it to answer (a restart) before they fail: if it is not "
                "meant to be running, check its URL (a batch's --patience, BatchClassifier's patience=, "
                "sets how long)",
                server.spec.shown,
                server.last_error,
                self._patience,
            )

    def _wake(self, count: int | None = None) -> None:
        """Wake ``count`` waiters (None: every one), the longest waiting first, each to look again."""
        woken = 0
        while self._waiters and (count is None or woken < count):
            waiter, avoid = self._waiters.popleft()
            self._avoiding -= bool(avoid)
            if not waiter.done():
                waiter.set_result(None)
                woken += 1

    def _until_change(self) -> float | None:
        """Seconds until a server that is out comes back (None: only a release can make room)."""
        now = self._clock()
        back = [s.out_until - now for s in self._servers if s.out_until > now]
        return max(0.0, min(back)) + 0.001 if back else None

    def _check_reachable(self) -> None:
        # Given up only while every server is out too: once a cool-down ends, that server is tried again.
        now = self._clock()
        if all(
            s.failures >= self._give_up_after
            and s.out_until > now
            and not s.in_flight
            and now - s.failing_since >= self._patience
            for s in self._servers
        ):
            said = "; ".join(f"{s.spec.shown}: {s.last_error}" for s in self._servers)
            raise NoUpstreamError(
                f"expected one of {len(self._servers)} server(s) to answer, got {self._give_up_after} "
                f"failures in a row from each: {said}; check that the servers run and their URLs",
                status=None,
                server_message=said,
                kind="unreachable",
            )
