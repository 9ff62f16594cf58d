"""What the cluster tests share: the check that they run where nothing can leave the machine, and
processes started in sessions of their own, so that a node (a Ray raylet with its workers, a Spark worker
with its executors) is killed whole, as a lost machine is."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

#: The venv's commands (ray, spark's launchers), as a user's shell finds them.
BIN = Path(sys.executable).parent


def loopback_only() -> None:
    """Fails unless this process sees no network interface but ``lo``: the clusters bind and send to
    every address they find, so they run inside ``unshare -n`` (scripts/cluster)."""
    # /proc/self/net is this process's namespace (/sys/class/net is the one /sys was mounted in).
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    interfaces = sorted(line.split(":", 1)[0].strip() for line in lines)
    if interfaces != ["lo"]:
        pytest.fail(
            f"the cluster tests need a network namespace with loopback alone, got interfaces {interfaces}; "
            "run them with scripts/cluster"
        )


class Sessions:
    """Commands started in sessions of their own (``start_new_session``), their output in a log file
    each; ``kill`` SIGKILLs every process of one session, ``close`` of all of them."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("wb") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.started[name] = process
        return process

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def kill(self, name: str) -> int:
        """SIGKILL every process of ``name``'s session; how many there were."""
        sid, killed = self.started[name].pid, 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.getsid(int(pid)) == sid:
                    os.kill(int(pid), signal.SIGKILL)
                    killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        self.started[name].wait(timeout=30)
        return killed

    def pids(self, name: str) -> set[int]:
        sid, found = self.started[name].pid, set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.getsid(int(pid)) == sid:
                    found.add(int(pid))
            except ProcessLookupError:
                pass
        return found

    def close(self) -> None:
        for name in reversed(list(self.started)):
            self.kill(name)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(what: str, ready: Callable[[], bool], seconds: float, every: float = 1.0) -> None:
    """Polls ``ready`` until it holds, at most ``seconds``; fails naming ``what`` after that."""
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {seconds:g} s")
        time.sleep(every)


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True
