"""What the engine tests share: rows, a question, the process behind a port, and killing a session."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pyarrow as pa

#: One short three-option question in the System One API's shape: one request per row and a short
#: prompt, so the equality test's 350 requests (100 rows on each engine, 50 again alone) stay cheap.
QUESTION: dict[str, Any] = {
    "topic": {"type": "choice", "criteria": {"billing": "a charge", "bug": "a crash", "other": "else"}}
}
_WHAT = ("charged twice", "app crashes", "office hours?", "refund please")


def rows(n: int) -> pa.Table:
    """``n`` distinct short support tickets with integer ids (the id makes each state its own)."""
    states = [f"#{i}: {_WHAT[i % 4]}" for i in range(n)]
    return pa.table({"id": pa.array(range(n), pa.int64()), "state": states})


def by_id(table: pa.Table | list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Rows keyed by id; fails when an id comes back twice."""
    listed = table.to_pylist() if isinstance(table, pa.Table) else table
    keyed = {row["id"]: row for row in listed}
    assert len(keyed) == len(listed), "an id came back more than once"
    return keyed


def probabilities(answer: dict[str, Any]) -> dict[str, float]:
    """A map column as a dict, from Arrow's (key, value) pairs or Spark's dict."""
    value = answer["probabilities"]
    return dict(value)


def listening_pid(port: int) -> int:
    """The process listening on a loopback TCP port (from /proc: no tool needed)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                inodes.add(fields[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        if any(link in {f"socket:[{i}]" for i in inodes} for link in links):
            return int(pid)
    raise LookupError(f"no process listens on port {port}")


def kill_session(sid: int) -> int:
    """SIGKILL every process of session ``sid`` (a driver started with start_new_session and all it
    started, Ray's own processes included): as if the machine had died. Returns how many."""
    killed = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[3]) == sid:
            try:
                os.kill(int(pid), signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def tasks_served(pid: int) -> int:
    """Requests a llama.cpp server has taken up, from its log, read through the process's own stdout
    (a log file removed by a rotation is still read this way)."""
    try:
        return Path(f"/proc/{pid}/fd/1").read_text(errors="replace").count("processing task")
    except OSError:
        return 0
