"""The batch on a Ray cluster started as its users start one: a head and two worker nodes by ``ray start``
(one CPU per worker, the head schedules nothing, as clusters usually run it), token authentication on.
The command line joins it with ``--engine-address``; a job goes in by ``ray job submit`` with its code
and jevper shipped in the runtime environment; a worker node hosting the job's actors is killed whole
mid-job, and every row still comes back exactly once (at once, or after the job is submitted again and
resumes from Ray's checkpoint). Runs with scripts/cluster, inside a loopback-only network namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _cluster import BIN, Sessions, accepts, free_port, loopback_only, wait_for

from jevper.servers import SpawnedServer

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
QUESTION = {
    "topic": {"type": "choice", "criteria": {"billing": "a charge", "bug": "a crash", "other": "else"}}
}
_WHAT = ("charged twice", "app crashes", "office hours?", "refund please")
#: Bytes of object store per node: the rows are small, and three nodes share 24 GB with the rest.
OBJECT_STORE = 100_000_000
#: Waits for the cluster's own steps (a node joining, a job ending), in seconds.
NODE_WAIT, JOB_WAIT = 120, 900
ENDED = ("SUCCEEDED", "FAILED", "STOPPED")

#: The job a user submits: its working directory holds this file and the questions; jevper arrives in
#: the runtime environment's py_modules. It prints where jevper was imported from, on the driver and
#: on a worker, so the test sees that the shipped copy ran.
JOB = """
import json
import sys
from pathlib import Path

import ray

import jevper
from jevper.batch import ray as jray

source, target, checkpoint, base_url, model = sys.argv[1:6]
jray.init()


@ray.remote(num_cpus=0.1)
def where() -> str:
    import jevper

    return jevper.__file__


print("driver's jevper:", jevper.__file__, flush=True)
print("worker's jevper:", ray.get(where.remote()), flush=True)
questions = json.loads(Path(__file__).with_name("questions.json").read_text())
server = {"base_url": base_url, "model": model, "slots": 4}
jray.classify_files(
    source, target, questions, [server], checkpoint=checkpoint, part_rows=20, actors=2, timeout=300.0
)
print("job finished", flush=True)
"""
#: Polls the cluster until it has N live nodes (bounded); prints how many.
NODES = """
import sys, time
import ray
ray.init(address=sys.argv[1])
for _ in range(int(sys.argv[3])):
    alive = sum(1 for node in ray.nodes() if node["Alive"])
    if alive >= int(sys.argv[2]):
        print(alive)
        sys.exit(0)
    time.sleep(1)
sys.exit(1)
"""


@dataclass
class RayCluster:
    address: str  # the head's GCS, for ray.init and --engine-address
    dashboard: str  # the job server, for ray job submit
    sessions: Sessions
    env: dict[str, str]


def ray_env() -> dict[str, str]:
    """A user's shell on a node: the venv's commands first, token authentication on, no RAY_ADDRESS."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, "RAY_AUTH_MODE": "token", "PATH": f"{BIN}:{env.get('PATH', '')}"}


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    loopback_only()
    temp = Path(tempfile.mkdtemp(prefix="jrc", dir="/tmp"))  # short: Ray's Unix sockets live in it
    sessions = Sessions(tmp_path_factory.mktemp("ray-logs"))
    env = ray_env()
    port, dashboard = free_port(), free_port()
    common = ["--node-ip-address", "127.0.0.1", "--object-store-memory", str(OBJECT_STORE)]
    common += ["--disable-usage-stats", "--block"]
    head = [str(BIN / "ray"), "start", "--head", "--port", str(port), "--num-cpus", "0", *common]
    head += ["--include-dashboard", "true", "--dashboard-host", "127.0.0.1"]
    head += ["--dashboard-port", str(dashboard), "--dashboard-agent-listen-port", str(free_port())]
    head += ["--temp-dir", str(temp)]
    try:
        sessions.start("head", head, env)
        wait_for("the head's dashboard", lambda: accepts(dashboard), NODE_WAIT)
        # One node at a time: two raylets starting at once on one machine took the same socket name
        # in the session's folder, and one aborted.
        for nodes, name in enumerate(("worker1", "worker2"), start=2):
            worker = [str(BIN / "ray"), "start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1", *common]
            sessions.start(name, [*worker, "--dashboard-agent-listen-port", str(free_port())], env)
            counted = subprocess.run(
                [sys.executable, "-c", NODES, f"127.0.0.1:{port}", str(nodes), str(NODE_WAIT)],
                capture_output=True,
                text=True,
                env=env,
                timeout=NODE_WAIT + 60,
            )
            assert counted.returncode == 0, counted.stderr[-2000:] + sessions.log(name)[-2000:]
        yield RayCluster(f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard}", sessions, env)
    finally:
        sessions.close()
        shutil.rmtree(temp, ignore_errors=True)


def write_rows(path: Path, n: int) -> None:
    path.write_text("".join(json.dumps({"id": i, "state": f"#{i}: {_WHAT[i % 4]}"}) + "\n" for i in range(n)))


def once(rows: list[dict[str, Any]], n: int) -> None:
    """Every id of ``range(n)`` exactly once, each answered."""
    ids = sorted(row["id"] for row in rows)
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} rows came back twice"
    assert ids == list(range(n)), f"missing: {sorted(set(range(n)) - set(ids))[:10]}"
    errors = [row["error"] for row in rows if row["error"] is not None]
    assert not errors, errors[:3]


def test_the_command_line_joined_to_the_cluster_answers_every_row_once(
    ray_cluster: RayCluster, cluster_llama: SpawnedServer, tmp_path: Path
) -> None:
    source, output, questions = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "q.json"
    write_rows(source, 60)
    questions.write_text(json.dumps(QUESTION))
    command = [sys.executable, "-m", "jevper.batch", str(source), str(output), "--questions", str(questions)]
    command += ["--base-url", cluster_llama.base_url, "--model", cluster_llama.model, "--timeout", "300"]
    command += ["--engine", "ray", "--engine-address", ray_cluster.address, "--workers", "2"]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=ray_cluster.env, timeout=600)
    print(f"the command line on the cluster: {time.monotonic() - started:.1f} s; {done.stdout.strip()}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "60 rows, 60 answered" in done.stdout
    once([json.loads(line) for line in output.read_text().splitlines()], 60)


def job_status(cluster: RayCluster, submission: str) -> str:
    done = subprocess.run(
        [str(BIN / "ray"), "job", "status", "--address", cluster.dashboard, submission],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=120,
    )
    said = done.stdout + done.stderr  # Ray's command line logger writes the status to stderr
    for status in ("SUCCEEDED", "FAILED", "STOPPED", "RUNNING", "PENDING"):
        # A job that has ended is said in other words: "Job 'ID' succeeded".
        ended = f"Job '{submission}' {status.lower()}" if status in ENDED else None
        if f"Status for job '{submission}': {status}" in said or (ended and ended in said):
            return status
    return "UNKNOWN"


def job_logs(cluster: RayCluster, submission: str) -> str:
    done = subprocess.run(
        [str(BIN / "ray"), "job", "logs", "--address", cluster.dashboard, submission],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=120,
    )
    return done.stdout + done.stderr


def submit(cluster: RayCluster, submission: str, job: Path, arguments: list[str]) -> None:
    runtime = {"py_modules": [str(ROOT / "jevper")], "excludes": ["__pycache__"]}
    command = [str(BIN / "ray"), "job", "submit", "--address", cluster.dashboard, "--no-wait"]
    command += ["--submission-id", submission, "--working-dir", str(job)]
    command += ["--runtime-env-json", json.dumps(runtime), "--", "python", "job.py", *arguments]
    done = subprocess.run(command, capture_output=True, text=True, env=cluster.env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def finished(cluster: RayCluster, submission: str) -> str:
    status = "PENDING"

    def ended() -> bool:
        nonlocal status
        status = job_status(cluster, submission)
        return status in ENDED

    wait_for(f"job {submission}", ended, JOB_WAIT, every=3)
    return status


def node_of_an_actor(cluster: RayCluster) -> str | None:
    """The worker node (by its session's name) whose processes include an actor of the job's Classify
    pool (Ray names an actor's process after its class, Ray Data's map worker: ``ray::_MapWorker``)."""
    for name in ("worker1", "worker2"):
        for pid in cluster.sessions.pids(name):
            try:
                line = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if line.startswith(b"ray::") and (b"Classify" in line or b"MapWorker" in line):
                return name
    return None


def test_a_submitted_job_survives_a_worker_node_killed_mid_job_with_every_row_once(
    ray_cluster: RayCluster, cluster_llama: SpawnedServer, tmp_path: Path
) -> None:
    n = 200
    data = tmp_path / "data"  # where the job's user says: a path every node of this machine reaches
    data.mkdir()
    write_rows(data / "in.jsonl", n)
    target, checkpoint = data / "parts", data / "checkpoint"
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.py").write_text(JOB)
    (job / "questions.json").write_text(json.dumps(QUESTION))
    arguments = [str(data / "in.jsonl"), str(target), str(checkpoint), cluster_llama.base_url]
    arguments.append(cluster_llama.model)

    def parts() -> list[Path]:
        return sorted(target.glob("*.parquet")) if target.exists() else []

    def asked() -> int:
        return cluster_llama.log_path.read_text(errors="replace").count("processing task")

    before = asked()
    started = time.monotonic()
    submit(ray_cluster, "classify-1", job, arguments)
    wait_for(
        "40 rows asked (or the job's end)",
        lambda: asked() - before >= 40 or job_status(ray_cluster, "classify-1") in ENDED,
        JOB_WAIT,
        every=2,
    )
    assert job_status(ray_cluster, "classify-1") == "RUNNING", job_logs(ray_cluster, "classify-1")[-3000:]
    victim = node_of_an_actor(ray_cluster)
    assert victim is not None, "no worker node hosts an actor of the pool"
    committed, asked_at_kill = len(parts()), asked() - before
    killed = ray_cluster.sessions.kill(victim)
    killed_at = time.monotonic()
    print(f"killed {victim} ({killed} processes) at {asked_at_kill} requests, {committed} parts committed")
    status = finished(ray_cluster, "classify-1")
    logs = job_logs(ray_cluster, "classify-1")
    print(f"first submission: {status} after {time.monotonic() - started:.1f} s\n{logs[-3000:]}")
    assert f"driver's jevper: {ROOT}" not in logs and "driver's jevper: " in logs  # the shipped copy
    assert f"worker's jevper: {ROOT}" not in logs and "worker's jevper: " in logs
    if status != "SUCCEEDED":
        submit(ray_cluster, "classify-2", job, arguments)  # the same job again: Ray's checkpoint resumes
        status = finished(ray_cluster, "classify-2")
        print(f"second submission: {status}\n{job_logs(ray_cluster, 'classify-2')[-3000:]}")
    assert status == "SUCCEEDED"
    print(
        f"finished {time.monotonic() - killed_at:.1f} s after the kill; {len(parts())} parts; "
        f"{asked() - before} requests for {n} rows"
    )
    once([row for path in parts() for row in pq.read_table(path).to_pylist()], n)
