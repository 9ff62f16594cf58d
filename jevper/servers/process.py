"""One process lifecycle for every server the harness starts: launch, health wait, logs, stop.

A server runs on a free loopback port with its output in a log of its own (the newest few kept per
kind), dies with the process that started it (a parent-death signal, on Linux), and is stopped with
SIGTERM, then SIGKILL after a grace period; one that forks workers runs in a process group of its
own, stopped as a group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx


class SpawnError(RuntimeError):
    """The server could not be started; the message says what was missing or what it printed."""


@dataclass(frozen=True)
class SpawnedServer:
    """A running server: where it listens and what it is."""

    base_url: str  # ends in /v1
    model: str
    server: str  # preset name, e.g. "llamacpp"
    version: str  # e.g. "b11549"
    model_name: str
    command: tuple[str, ...]  # as provenance records it: no machine paths, no key
    log_path: Path
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Launch:
    """How to start one server process and how to know it is up."""

    name: str  # in messages, e.g. "llama.cpp b11549"
    command: Sequence[str]
    env: Mapping[str, str]
    port: int
    log_prefix: str  # logs are <cache>/<prefix>-<port>.log
    log_dir: Path | None = None  # default: the cache directory
    health_path: str = "/health"  # answers 200 once the server serves
    own_group: bool = False  # it forks workers: a process group of its own, stopped as a group
    grace_s: float = 5.0  # from SIGTERM to SIGKILL
    poll_s: float = 0.1
    #: Said after a SIGILL: the program uses an instruction this CPU lacks, and what runs instead.
    sigill_hint: str = ""


@dataclass(frozen=True)
class Running:
    process: subprocess.Popen[bytes]
    root_url: str  # http://127.0.0.1:<port>
    log_path: Path
    identity: str  # what the identify callback read once the server was healthy (its version)

    def serving(
        self,
        kind: str,
        *,
        model: str,
        version: str,
        model_name: str,
        command: Sequence[str],
        extra: Mapping[str, str],
    ) -> SpawnedServer:
        """What the harness knows of this process as a server of `kind`, serving on /v1."""
        return SpawnedServer(
            base_url=f"{self.root_url}/v1",
            model=model,
            server=kind,
            version=version,
            model_name=model_name,
            command=tuple(command),
            log_path=self.log_path,
            extra=dict(extra),
        )


def cache_dir() -> Path:
    root = os.environ.get("JEVPER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "jevper"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>


def die_with_parent_hook() -> Callable[[], None] | None:
    """The Popen preexec_fn that ties a server's life to ours (Linux only; None elsewhere).

    If whoever started the server dies without unwinding (SIGTERM, SIGKILL, a CI time-out), the server
    is sent SIGTERM instead of living on, holding its port and memory. prctl is looked up here, in the
    parent, so the forked child only makes the call (no library loading between fork and exec).
    """
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def die_with_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return die_with_parent


#: Server logs kept per kind: each start writes a new one, and only the newest few help anyone.
KEEP_LOGS = 5


def new_log(directory: Path, prefix: str, port: int) -> Path:
    """The log path for a server starting on `port`, after removing all but the newest earlier logs."""
    earlier = sorted(directory.glob(f"{prefix}-*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in earlier[KEEP_LOGS - 1 :]:
        stale.unlink(missing_ok=True)
    return directory / f"{prefix}-{port}.log"


def exit_words(status: int, sigill_hint: str = "") -> str:
    """How a process ended, in words: a signal is named, and SIGILL says what it means."""
    if status >= 0:
        return f"exited with status {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = f"signal {-status}"
    if -status == signal.SIGILL:
        hint = f"; {sigill_hint}" if sigill_hint else ""
        return (
            f"was killed by {name} (illegal instruction: the program uses an instruction set this CPU "
            f"does not offer{hint})"
        )
    return f"was killed by {name}"


@contextlib.contextmanager
def launched(launch: Launch, *, identify: Callable[[str], str], timeout: float) -> Iterator[Running]:
    """Start the process, wait until its health route answers 200, and stop it on exit."""
    log_path = new_log(launch.log_dir or cache_dir(), launch.log_prefix, launch.port)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            list(launch.command),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(launch.env),
            start_new_session=launch.own_group,
            preexec_fn=die_with_parent_hook(),
        )
    try:
        root = f"http://127.0.0.1:{launch.port}"
        identity = _wait_healthy(launch, process, root, log_path, identify, timeout)
        yield Running(process, root, log_path, identity)
    finally:
        stop(process, launch.grace_s, group=launch.own_group)


def _wait_healthy(
    launch: Launch,
    process: subprocess.Popen[bytes],
    root: str,
    log_path: Path,
    identify: Callable[[str], str],
    timeout: float,
) -> str:
    """Poll the health route until it answers 200, then return what `identify(root)` reads.

    A process that exits first, or a deadline that passes, is a SpawnError quoting the log's tail.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            try:
                tail = log_path.read_text(errors="replace")[-3000:]
            except OSError as error:  # pruned by a later start, or unreadable
                tail = f"(its log {log_path.name} could not be read: {error})"
            ended = exit_words(process.returncode, launch.sigill_hint)
            raise SpawnError(f"{launch.name} {ended} before serving:\n{tail}")
        try:
            if httpx.get(f"{root}{launch.health_path}", timeout=2.0).status_code == 200:
                return identify(root)
        except httpx.HTTPError:
            pass
        time.sleep(launch.poll_s)
    raise SpawnError(
        f"{launch.name} did not answer {launch.health_path} within {timeout:.0f} s (log: {log_path})"
    )


def stop(process: subprocess.Popen[bytes], grace: float = 5.0, *, group: bool = False) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; a process group is killed whole at the end."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=grace)
    if group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
