"""One process lifecycle for every server started here: launch, health wait, logs, stop.

A server runs on a free loopback port with its output in a log of its own (the newest few kept per
kind), dies with the process that started it (a parent-death signal, on Linux), and is stopped with
SIGTERM, then SIGKILL after a grace period; one that forks workers runs in a process group of its
own, stopped as a group.

A port is picked before the server binds it, so another start may take it in between: the server is
then started again on another port (up to BIND_ATTEMPTS times), whether it died of the taken port or
found someone else's server answering on it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


#: Stands for the port in a Launch's command (``"--port", PORT``): launched() fills in the one it picked.
PORT = "{port}"
#: Starts on a fresh port after another start took the one picked, before giving up.
BIND_ATTEMPTS = 3


@dataclass(frozen=True)
class Launch:
    """How to start one server process and how to know it is up."""

    name: str  # in messages, e.g. "llama.cpp b11549"
    command: Sequence[str]  # PORT stands for the port
    env: Mapping[str, str]
    log_prefix: str  # logs are <cache>/<prefix>-<port>.log
    #: None: a free one, picked again when another start takes it first; a port given is used as is.
    port: int | None = None
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


_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def free_port() -> int:
    """A loopback port nothing listens on now, never one this process handed out before (so two
    starts in one process never pick the same one; across processes, launched() recovers)."""
    with _handed_out_lock:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port


def port_taken(port: int) -> bool:
    """Whether something holds the loopback port: a listener, or a socket bound without reuse."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


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


class _Forker:
    """The one thread every server is started from, alive as long as the process.

    Linux sends the parent-death signal when the *thread* that forked the child ends, not the process:
    a server started from a short-lived thread (a worker of a pool, a test's thread) was sent SIGTERM
    the moment that thread returned. Forked from this daemon thread instead, it lives until the
    process ends, as the module's docstring promises.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen[bytes]], Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None

    def popen(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        with self._lock:
            # After a fork the thread is gone from the child process: start another there.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="jevper-servers-forker", daemon=True)
                self._thread.start()
        done: Future[subprocess.Popen[bytes]] = Future()
        self._jobs.put((start, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            start, done = self._jobs.get()
            try:
                done.set_result(start())
            except BaseException as exc:
                done.set_exception(exc)


_FORKER = _Forker()


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
    for attempt in range(1, BIND_ATTEMPTS + 1):
        port = launch.port or free_port()
        log_path = new_log(launch.log_dir or cache_dir(), launch.log_prefix, port)
        process = _start(launch, port, log_path)
        try:
            root = f"http://127.0.0.1:{port}"
            try:
                identity = _wait_healthy(launch, process, root, port, log_path, identify, timeout)
            except _PortLost:
                if launch.port is None and attempt < BIND_ATTEMPTS:
                    continue  # another start took the port first: try a fresh one
                raise SpawnError(
                    f"{launch.name} could not bind port {port}: another process holds it (log: {log_path})"
                ) from None
            yield Running(process, root, log_path, identity)
            return
        finally:
            stop(process, launch.grace_s, group=launch.own_group)


class _PortLost(Exception):
    """The server's port was taken by another process between picking it and the server binding it."""


def _start(launch: Launch, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    command = [part.replace(PORT, str(port)) for part in launch.command]
    hook = die_with_parent_hook()
    with open(log_path, "wb") as log:
        return _FORKER.popen(
            lambda: subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(launch.env),
                start_new_session=launch.own_group,
                preexec_fn=hook,
            )
        )


def _wait_healthy(
    launch: Launch,
    process: subprocess.Popen[bytes],
    root: str,
    port: int,
    log_path: Path,
    identify: Callable[[str], str],
    timeout: float,
) -> str:
    """Poll the health route until it answers 200, then return what `identify(root)` reads.

    A process that exits first, or a deadline that passes, is a SpawnError quoting the log's tail;
    _PortLost when the port turns out to be another process's.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            if port_taken(port):
                raise _PortLost(port)
            try:
                tail = log_path.read_text(errors="replace")[-3000:]
            except OSError as error:  # pruned by a later start, or unreadable
                tail = f"(its log {log_path.name} could not be read: {error})"
            ended = exit_words(process.returncode, launch.sigill_hint)
            raise SpawnError(f"{launch.name} {ended} before serving:\n{tail}")
        try:
            if httpx.get(f"{root}{launch.health_path}", timeout=2.0).status_code == 200:
                if listener_elsewhere(port, process.pid):
                    raise _PortLost(port)  # someone else's server answered; ours will not bind
                return identify(root)
        except httpx.HTTPError:
            pass
        time.sleep(launch.poll_s)
    raise SpawnError(
        f"{launch.name} did not answer {launch.health_path} within {timeout:.0f} s (log: {log_path})"
    )


def listener_elsewhere(port: int, pid: int) -> bool:
    """Whether the loopback listener on `port` belongs to a process other than `pid` and its
    descendants (read from /proc, on Linux; elsewhere nothing can be told, and False is said)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return False
    sockets, readable = {f"socket:[{inode}]" for inode in inodes}, False
    for member in _descendants(pid):
        try:
            fds = os.listdir(f"/proc/{member}/fd")
        except OSError:
            continue
        readable = True
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{member}/fd/{fd}") in sockets:
                    return False
    return readable  # when none of its descriptors could be read, nothing can be told


def _listening_inodes(port: int) -> set[str]:
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local address "ADDR:PORT" in hex; state 0A is LISTEN; the inode is the tenth field
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    family, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in family} - family
        family |= more
        grew = bool(more)
    return family


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
