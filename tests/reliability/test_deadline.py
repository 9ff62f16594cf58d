"""The deadline watchdog: a read blocked past the deadline returns at it, and a stopped alarm never fires."""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import openai
import pytest

from jevper import Noul, ProviderError, SystemOneClient, _deadline


class _Stream:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def get_extra_info(self, name: str) -> object:
        return self.sock if name == "socket" else None


def test_a_read_blocked_past_the_deadline_returns_at_the_deadline() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        alarm = _deadline.start(0.3)
        assert _deadline.watch(alarm, _Stream(ours))
        started = time.monotonic()
        assert ours.recv(1) == b""  # the peer never writes; the shutdown ends the read
        assert 0.2 < time.monotonic() - started < 1.0
        assert _deadline.stop(alarm)


def test_a_stopped_alarm_leaves_its_socket_open() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        alarm = _deadline.start(0.1)
        _deadline.watch(alarm, _Stream(ours))
        assert not _deadline.stop(alarm)
        time.sleep(0.2)
        theirs.sendall(b"x")
        assert ours.recv(1) == b"x"


class _CountedCondition(threading.Condition):
    """A condition that counts its notifications: each one wakes the watchdog's thread."""

    notified = 0

    def notify(self, n: int = 1) -> None:
        self.notified += 1
        super().notify(n)


def test_requests_one_after_another_never_wake_the_watchdog_before_their_deadline() -> None:
    # Each wake-up handed the interpreter to the watchdog's thread and back, on every request.
    dog = _deadline._Watchdog()
    dog._cond = counted = _CountedCondition()
    ours, theirs = socket.socketpair()
    with ours, theirs:
        for _ in range(20):
            alarm = _deadline.Alarm(time.monotonic() + 60)
            dog.arm(alarm, ours)
            time.sleep(0.005)  # the watchdog's thread goes back to sleep until a deadline
            dog.disarm(alarm)
        assert counted.notified == 0
        assert len(dog._heap) <= 2  # the answered ones are dropped as new ones come


def test_an_earlier_deadline_armed_after_a_later_one_still_fires_at_its_time() -> None:
    dog = _deadline._Watchdog()
    ours, theirs, spare, other = *socket.socketpair(), *socket.socketpair()
    with ours, theirs, spare, other:
        later = _deadline.Alarm(time.monotonic() + 60)
        dog.arm(later, spare)
        time.sleep(0.05)  # the watchdog sleeps until the later deadline
        soon = _deadline.Alarm(time.monotonic() + 0.2)
        dog.arm(soon, ours)
        started = time.monotonic()
        assert ours.recv(1) == b""
        assert 0.1 < time.monotonic() - started < 1.0 and soon.fired and not later.fired
        dog.disarm(later)


def test_a_stream_without_a_socket_is_not_watched() -> None:
    assert not _deadline.watch(_deadline.start(0.1), object())


def test_a_view_of_a_lent_http_client_passes_the_sdks_checks_and_never_closes_it() -> None:
    lent = openai.DefaultHttpxClient()
    view = _deadline.watching(lent)
    assert isinstance(view, type(lent))
    assert view.timeout == lent.timeout and not view.is_closed
    view.close()
    del view
    gc.collect()
    assert not lent.is_closed
    lent.close()
    assert _deadline.watching(openai.DefaultAsyncHttpxClient()) is None


def _client_over(sock: socket.socket, http_version: bytes) -> SystemOneClient:
    """A duck-typed client whose streamed answer arrives after the deadline on a socket it names."""

    class Streamed:
        http_response = SimpleNamespace(
            extensions={"http_version": http_version, "network_stream": _Stream(sock)}
        )

        def __enter__(self) -> Streamed:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def iter_bytes(self) -> Iterator[bytes]:
            time.sleep(0.3)
            yield b"{}"

    create = SimpleNamespace(create=lambda **kwargs: Streamed())
    sdk = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(with_streaming_response=create)))
    return SystemOneClient(sdk, model="m", api="chat_completions", method="logprobs", timeout=0.1)


@pytest.mark.parametrize(("http_version", "shut"), [(b"HTTP/1.1", True), (b"HTTP/2", False)])
def test_the_deadline_cuts_its_own_connection_but_never_a_shared_http2_one(
    http_version: bytes, shut: bool
) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        with pytest.raises(ProviderError, match=r"whole answer within the 0\.1 s timeout"):
            _client_over(ours, http_version).system_one(state="x", questions={"q": Noul("Is it urgent?")})
        ours.setblocking(False)
        if shut:
            assert ours.recv(1) == b""  # shut down: reads end at once
        else:
            with pytest.raises(BlockingIOError):  # still open, waiting for the peer
                ours.recv(1)
