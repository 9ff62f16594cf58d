"""`python -m jevper.servers.llamacpp`: the one command the docs give for a server to try their examples
on. It prints its base URL and model, serves until SIGTERM or Ctrl-C, and refuses a port already taken."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

COMMAND = (sys.executable, "-m", "jevper.servers.llamacpp")


def started(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*COMMAND, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    )


def announced(process: subprocess.Popen[str], timeout: float = 120.0) -> dict[str, str]:
    """The ``name: value`` lines the command prints once it serves (base URL, model)."""
    assert process.stdout is not None
    said: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while "model" not in said and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        name, _, value = line.rstrip("\n").partition(": ")
        said[name] = value
    return said


@pytest.fixture
def holder() -> Iterator[int]:
    """A loopback port some other program listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_port_already_taken_is_refused_naming_it_and_the_way_out(holder: int) -> None:
    done = subprocess.run([*COMMAND, "--port", str(holder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"port {holder} is taken" in done.stderr and "--port" in done.stderr
    assert done.stdout == ""


def test_it_serves_on_the_documented_port_unless_told_and_says_so_in_its_help() -> None:
    done = subprocess.run([*COMMAND, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "(default: 8080)" in done.stdout and "(default: smollm2)" in done.stdout


@pytest.mark.live
def test_it_prints_its_base_url_and_model_serves_them_and_stops_on_sigterm() -> None:
    process = started("--port", "0", "--concurrency", "2")
    try:
        said = announced(process)
        assert said.get("base URL", "").startswith("http://127.0.0.1:"), said
        assert said["base URL"].endswith("/v1") and said["model"] == "smollm2", said
        listed = httpx.get(f"{said['base URL']}/models", timeout=10).json()
        assert said["model"] in [model["id"] for model in listed["data"]]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{said['base URL']}/models", timeout=5)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
