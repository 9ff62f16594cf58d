"""What the cluster tests and the cluster benchmark (tests/bench/bench_clusters.py) share: the check that
they run where nothing can leave the machine, processes started in sessions of their own, so that a node
(a Ray raylet with its workers, a Spark worker with its executors) is killed whole, as a lost machine is,
the rows a job is given, the count of what it wrote, and the kill mid-job."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


#: The question the cluster runs ask of each row.
QUESTION = {
    "topic": {"type": "choice", "criteria": {"billing": "a charge", "bug": "a crash", "other": "else"}}
}
_WHAT = ("charged twice", "app crashes", "office hours?", "refund please")
#: Waits for a job's own steps (a node joining, a job ending), in seconds.
NODE_WAIT, JOB_WAIT = 120, 900


def write_rows(path: Path, n: int) -> None:
    """``n`` JSON Lines rows, ids 0 to n - 1, each with a state of its own."""
    path.write_text("".join(json.dumps({"id": i, "state": f"#{i}: {_WHAT[i % 4]}"}) + "\n" for i in range(n)))


@dataclass(frozen=True)
class Count:
    """How a job's written rows compare with the ids it was given."""

    rows: int
    lost: int
    duplicated: int
    errors: list[Any]


def counted(rows: list[dict[str, Any]], ids: Sequence[Any], id_column: str = "id") -> Count:
    written = Counter(row[id_column] for row in rows)
    return Count(
        rows=len(rows),
        lost=len(set(ids) - set(written)),
        duplicated=sum(n - 1 for n in written.values()),
        errors=[row["error"] for row in rows if row["error"] is not None],
    )


def once(rows: list[dict[str, Any]], n: int) -> None:
    """Every id of ``range(n)`` exactly once, each answered."""
    found = counted(rows, range(n))
    assert found.duplicated == 0, f"{found.duplicated} rows came back twice"
    ids = {row["id"] for row in rows}
    assert found.lost == 0 and ids == set(range(n)), f"missing: {sorted(set(range(n)) - ids)[:10]}"
    assert not found.errors, found.errors[:3]


class Requests:
    """The requests a llama.cpp server began since this was made (its log's ``processing task`` lines)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.before = self._total()

    def _total(self) -> int:
        return self.log.read_text(errors="replace").count("processing task")

    def __call__(self) -> int:
        return self._total() - self.before


@dataclass(frozen=True)
class Kill:
    """A kill mid-job: what was killed, after how many requests, and when (``time.monotonic``)."""

    what: str
    at_requests: int
    at: float


def kill_mid_job(
    asked: Callable[[], int], at: int, ended: Callable[[], bool], kill: Callable[[], str]
) -> Kill:
    """Waits until a running job has made ``at`` requests, then ``kill()`` (which says what it killed);
    fails when the job ends first, as the kill would have hit nothing."""
    wait_for(f"{at} rows asked (or the job's end)", lambda: asked() >= at or ended(), JOB_WAIT, every=2)
    if ended():
        pytest.fail(f"the job ended after {asked()} requests, before the kill at {at}")
    made = asked()
    return Kill(kill(), made, time.monotonic())
