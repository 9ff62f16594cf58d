"""A total deadline for one HTTP exchange, where httpx's timeout bounds each read but not the whole body.

One daemon thread holds the armed deadlines; at a deadline it shuts the exchange's socket down, so a read
blocked on a server that drips or stalls returns at once and the connection is never reused. The thread
leaves when nothing has been armed for a while.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import inspect
import itertools
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, cast

#: How long the watchdog thread waits with nothing armed before it ends.
_IDLE_S = 30.0


@dataclass(eq=False)
class Alarm:
    """One armed deadline; ``fired`` says the socket was shut down because the deadline passed."""

    deadline: float
    sock: socket.socket | None = None
    fired: bool = False
    disarmed: bool = False

    def passed(self) -> bool:
        return self.fired or time.monotonic() >= self.deadline


class _Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Alarm]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._wakes_at = 0.0  # when the watchdog next looks at the heap by itself

    def arm(self, alarm: Alarm, sock: socket.socket) -> None:
        with self._cond:
            if alarm.disarmed or alarm.fired or alarm.sock is not None:
                return
            alarm.sock = sock
            heap = self._heap
            while heap and heap[0][2].disarmed:  # answered exchanges, oldest first
                heapq.heappop(heap)
            heapq.heappush(heap, (alarm.deadline, next(self._order), alarm))
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="jevper-deadline", daemon=True)
                self._thread.start()
            elif alarm.deadline < self._wakes_at:
                # A deadline after the one the watchdog sleeps until needs no wake-up: waking it for
                # every request made each request hand the interpreter to that thread and back.
                self._cond.notify()

    def disarm(self, alarm: Alarm) -> None:
        # Under the lock: either the socket is shut down first and ``fired`` says so, or never.
        with self._cond:
            alarm.disarmed = True

    def _watch(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].disarmed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._wakes_at = time.monotonic() + _IDLE_S
                    if not self._cond.wait(_IDLE_S) and not self._heap:
                        self._thread = None
                        return
                    continue
                self._wakes_at = self._heap[0][0]
                wait = self._wakes_at - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                _, _, alarm = heapq.heappop(self._heap)
                alarm.fired = True
                if alarm.sock is not None:
                    with contextlib.suppress(OSError):
                        alarm.sock.shutdown(socket.SHUT_RDWR)


_WATCHDOG = _Watchdog()


def start(seconds: float) -> Alarm:
    """A deadline ``seconds`` from now, not yet watching a socket."""
    return Alarm(time.monotonic() + seconds)


def watch(alarm: Alarm, network_stream: object) -> bool:
    """Shut the socket of an httpcore network stream down at the alarm's deadline; False without one."""
    get_extra_info = getattr(network_stream, "get_extra_info", None)
    sock = get_extra_info("socket") if callable(get_extra_info) else None
    if not isinstance(sock, socket.socket):
        return False
    _WATCHDOG.arm(alarm, sock)
    return True


def stop(alarm: Alarm) -> bool:
    """Stop watching; True when the deadline had already shut the socket down."""
    _WATCHDOG.disarm(alarm)
    return alarm.fired


#: The alarm of the exchange this thread is making, for the client view below.
CURRENT: contextvars.ContextVar[Alarm | None] = contextvars.ContextVar("jevper_alarm", default=None)


def watch_response(alarm: Alarm, response: Any) -> None:
    """Watch the socket under an httpx-style response, unless it is a shared HTTP/2 connection
    (not ours to cut)."""
    extensions = getattr(response, "extensions", None) or {}
    if extensions.get("http_version") != b"HTTP/2":
        watch(alarm, extensions.get("network_stream"))


def _on_response(response: Any) -> None:
    """Watch the socket as soon as the headers are in, before an SDK reads an error body by itself."""
    alarm = CURRENT.get()
    if alarm is not None:
        watch_response(alarm, response)


class _Watched:
    """A blocking httpx-style client lent to jevper, seen through a view that arms the current deadline
    as a response's headers arrive. The lent client does the work and is never written to; ``close()``
    leaves it open, for its owner to close."""

    def __init__(self, lent: object) -> None:
        self.__dict__["_lent"] = lent

    def __getattr__(self, name: str) -> Any:
        lent = self.__dict__.get("_lent")
        if lent is None:
            raise AttributeError(name)
        return getattr(lent, name)

    def build_request(self, *args: Any, **kwargs: Any) -> Any:
        return self._lent.build_request(*args, **kwargs)

    def send(self, request: Any, **kwargs: Any) -> Any:
        response = self._lent.send(request, **kwargs)
        # Only a streamed response has a body left to read, and its connection is still its own.
        if kwargs.get("stream"):
            _on_response(response)
        return response

    def close(self) -> None:
        pass

    def __del__(self) -> None:
        pass


#: client class -> the view's class, a subclass of it so that the SDKs' isinstance checks pass.
_VIEWS: dict[type, type[_Watched]] = {}


def watching(http_client: object) -> object | None:
    """A view of a blocking httpx-style client for jevper's own copy of an SDK client, or None for any
    other kind (an async client is bounded by ``asyncio.timeout`` instead).

    The openai and anthropic SDKs read a non-2xx body themselves before raising, so without the view a
    server dripping an error body would be bounded per read only. Outside jevper's calls the view only
    passes requests on.
    """
    kind = type(http_client)
    send = getattr(kind, "send", None)
    if (
        not callable(send)
        or inspect.iscoroutinefunction(send)
        or not callable(getattr(kind, "build_request", None))
    ):
        return None
    view = _VIEWS.get(kind)
    if view is None:
        try:
            made = cast("type[_Watched]", type(f"Watched{kind.__name__}", (_Watched, kind), {}))
            view = _VIEWS.setdefault(kind, made)
        except TypeError:  # a class that cannot be subclassed
            return None
    return view(http_client)
