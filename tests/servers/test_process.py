"""The process lifecycle every server starts on (jevper.servers.process), with Python's own http.server as
the server: its death signal and its choice of port."""

from __future__ import annotations

import contextlib
import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from jevper.servers import process
from jevper.servers.process import PORT, Launch, Running, SpawnError, free_port, launched, listener_elsewhere
from jevper.testing.loopback import served_on_a_thread


def http_server(tmp_path: Path, port: int | None = None) -> Launch:
    """`python -m http.server` on loopback: GET / lists the folder with a 200 once it serves."""
    command = [sys.executable, "-m", "http.server", PORT, "--bind", "127.0.0.1", "--directory", str(tmp_path)]
    return Launch(
        name="http.server",
        command=command,
        env={"PATH": "/usr/bin:/bin"},
        log_prefix="http-server",
        log_dir=tmp_path,
        port=port,
        health_path="/",
        grace_s=2.0,
    )


def serving(launch: Launch) -> contextlib.AbstractContextManager[Running]:
    return launched(launch, identify=lambda _: "http.server", timeout=30)


def test_a_server_started_from_a_thread_that_then_ends_keeps_running(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        started: list[Running] = []
        # The thread enters the context and returns; the server must outlive the thread, not the stack.
        thread = threading.Thread(
            target=lambda: started.append(stack.enter_context(serving(http_server(tmp_path))))
        )
        thread.start()
        thread.join()
        running = started[0]
        # A death signal tied to the thread arrives as it ends: the server would be gone within a second.
        with pytest.raises(subprocess.TimeoutExpired):
            running.process.wait(timeout=1.0)
        assert httpx.get(f"{running.root_url}/", timeout=5).status_code == 200
    assert running.process.poll() is not None  # and the stack, leaving, stopped it


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port held the way a server that won the race for it would: bound, without reuse."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        yield int(holder.getsockname()[1])


def first_pick(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """The port launched() picks first is `port`: another start takes it between pick and bind."""
    picks = iter([port])
    monkeypatch.setattr(process, "free_port", lambda: next(picks, None) or free_port())


def test_a_server_whose_port_another_process_bound_first_starts_again_on_another(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_pick(monkeypatch, taken_port)
    with serving(http_server(tmp_path)) as running:
        assert running.root_url != f"http://127.0.0.1:{taken_port}"
        assert httpx.get(f"{running.root_url}/", timeout=5).status_code == 200
    # The first attempt's log says what happened to it.
    assert "Address already in use" in (tmp_path / f"http-server-{taken_port}.log").read_text()


@contextlib.contextmanager
def another_server() -> Iterator[int]:
    """An HTTP server of someone else's, in this process, answering 200 on every path."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    with served_on_a_thread(server):
        yield int(server.server_address[1])


def test_a_server_is_not_taken_for_another_that_answers_on_the_port_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with another_server() as theirs:
        first_pick(monkeypatch, theirs)
        with serving(http_server(tmp_path)) as running:
            assert running.root_url != f"http://127.0.0.1:{theirs}"
            port = int(running.root_url.rsplit(":", 1)[1])
            assert not listener_elsewhere(port, running.process.pid)
            assert listener_elsewhere(theirs, running.process.pid)


def test_a_port_given_by_the_caller_is_not_replaced_and_its_loss_is_named(
    tmp_path: Path, taken_port: int
) -> None:
    with pytest.raises(SpawnError, match=rf"could not bind port {taken_port}: another process holds it"):
        serving(http_server(tmp_path, port=taken_port)).__enter__()


def test_two_starts_racing_for_ports_each_serve_on_a_port_of_their_own(tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert len(set(pool.map(lambda _: free_port(), range(64)))) == 64
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(max_workers=2) as pool:
        folders = [tmp_path / "a", tmp_path / "b"]
        for folder in folders:
            folder.mkdir()
        both = list(pool.map(lambda f: stack.enter_context(serving(http_server(f))), folders))
        assert len({r.root_url for r in both}) == 2
        for running in both:
            port = int(running.root_url.rsplit(":", 1)[1])
            assert not listener_elsewhere(port, running.process.pid)
