"""Ray's resource requests against a cluster of small nodes, and a cluster that is not there.

The placement tests run the command line in a child process on a local Ray of one CPU (a node as small
as a one-CPU node of a real cluster), against the loopback fault server: every task and actor the batch
asks for has to fit beside the others, and a pool that cannot fit has to say so within its timeout. The
unreachable address is offline: nothing listens there, so no Ray process starts.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jevper.testing.faults import FaultServer, running

#: The child: a local Ray of one logical CPU, then the command line, which joins it.
ONE_CPU_RAY = """
import sys
from jevper.batch import cli
from jevper.batch import ray as jray

jray.init(num_cpus=1, object_store_memory=200 * 1024 * 1024)
sys.exit(cli.main(sys.argv[1:]))
"""
QUESTION = {"topic": {"type": "choice", "criteria": {"billing": "a charge", "bug": "a crash"}}}


@pytest.fixture(scope="module")
def faults() -> Iterator[FaultServer]:
    with running() as server:
        yield server


def inputs(folder: Path, rows: int) -> list[str]:
    """INPUT and --questions of ``rows`` tickets, as command-line arguments."""
    source, questions = folder / "in.jsonl", folder / "questions.json"
    source.write_text(
        "".join(json.dumps({"id": i, "state": f"Ticket {i}: charged twice"}) + "\n" for i in range(rows))
    )
    questions.write_text(json.dumps(QUESTION))
    return [str(source), "--questions", str(questions)]


def run_child(command: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``command`` in a session of its own, every process of which (Ray's own included) is killed when
    it ends or when ``timeout`` passes (subprocess.TimeoutExpired then)."""
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        out, err = child.communicate(timeout=timeout)
    finally:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.getsid(int(pid)) == child.pid:
                    os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        child.wait()
    return subprocess.CompletedProcess(command, child.returncode, out, err)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_ray_address_with_nothing_listening_is_refused_within_seconds_naming_it(tmp_path: Path) -> None:
    port = free_port()  # closed again: nothing listens there
    output = tmp_path / "out.jsonl"
    command = [sys.executable, "-m", "jevper.batch", *inputs(tmp_path, 3), str(output)]
    command += ["--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
    command += ["--engine", "ray", "--engine-address", f"127.0.0.1:{port}"]
    started = time.monotonic()
    done = run_child(command, {**os.environ, "RAY_ADDRESS": ""}, timeout=150)
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"Ray cluster at 127.0.0.1:{port} (--engine-address or RAY_ADDRESS)" in done.stderr
    assert "ray start --head" in done.stderr
    assert took < 60, f"{took:.1f} s"
    # Nothing was asked: no run is left for --resume, and the same command can run again as it is.
    assert not list(tmp_path.glob("out.jsonl*"))


@pytest.mark.live
def test_two_workers_finish_on_a_ray_node_of_one_cpu(faults: FaultServer, tmp_path: Path) -> None:
    # Two actors of a fraction of a CPU, the read, the repartition and the write tasks all fit on one
    # CPU: before, the repartition task asked a whole CPU beside the actors and the job waited forever.
    output = tmp_path / "out.jsonl"
    command = [sys.executable, "-c", ONE_CPU_RAY, *inputs(tmp_path, 40), str(output)]
    command += ["--base-url", faults.base_url(), "--model", faults.model, "--api", "chat_completions"]
    command += ["--engine", "ray", "--workers", "2"]
    done = run_child(command, {**os.environ, "RAY_ADDRESS": ""}, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert sorted(row["id"] for row in rows) == list(range(40))
    assert all(row["error"] is None for row in rows)


@pytest.mark.live
def test_a_pool_the_cluster_cannot_place_is_refused_within_the_placement_timeout(
    faults: FaultServer, tmp_path: Path
) -> None:
    # Five actors of a quarter CPU on one CPU: the fifth fits nowhere. Ray's own setting bounds the wait.
    output = tmp_path / "out.jsonl"
    command = [sys.executable, "-c", ONE_CPU_RAY, *inputs(tmp_path, 10), str(output)]
    command += ["--base-url", faults.base_url(), "--model", faults.model, "--api", "chat_completions"]
    command += ["--engine", "ray", "--workers", "5"]
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_DATA_DEFAULT_WAIT_FOR_MIN_ACTORS_S": "3"}
    started = time.monotonic()
    done = run_child(command, env, timeout=240)
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr[-3000:]
    assert (
        "--workers 5: expected the Ray cluster to start 5 actors of 0.25 CPU each within 3 s" in done.stderr
    )
    assert "1 nodes with 1 CPUs" in done.stderr
    assert took < 120, f"{took:.1f} s"
    assert not output.exists()
