"""The deadline watchdog: a read blocked past the deadline returns at it, and a stopped alarm never fires."""

from __future__ import annotations

import socket
import time

from jevper import _deadline


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


def test_a_stream_without_a_socket_is_not_watched() -> None:
    assert not _deadline.watch(_deadline.start(0.1), object())
