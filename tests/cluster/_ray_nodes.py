"""A Ray cluster started as its users start one, for the cluster tests and the cluster benchmark: a head
and two worker nodes by ``ray start`` (one CPU per worker, the head schedules nothing, as clusters usually
run it), token authentication on, jobs sent by ``ray job submit`` with jevper shipped in the runtime
environment, and a worker node hosting the job's actors killed whole mid-job."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from _cluster import (
    BIN,
    JOB_WAIT,
    NODE_WAIT,
    Kill,
    Sessions,
    accepts,
    free_port,
    kill_mid_job,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]
#: Bytes of object store per node: the rows are small, and three nodes share 24 GB with the rest.
OBJECT_STORE = 100_000_000
ENDED = ("SUCCEEDED", "FAILED", "STOPPED")

#: The job a user submits: its working directory holds this file and the questions; jevper arrives in
#: the runtime environment's py_modules. It prints where jevper was imported from, on the driver and
#: on a worker, so a test sees that the shipped copy ran.
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
servers = [{"base_url": url, "model": model, "slots": 4} for url in base_url.split(",")]
jray.classify_files(
    source, target, questions, servers, checkpoint=checkpoint, part_rows=20, actors=2, timeout=300.0
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
    started_s: float = 0.0  # seconds from the head's start to the last worker node counted


def ray_env() -> dict[str, str]:
    """A user's shell on a node: the venv's commands first, token authentication on, no RAY_ADDRESS."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, "RAY_AUTH_MODE": "token", "PATH": f"{BIN}:{env.get('PATH', '')}"}


@contextlib.contextmanager
def ray_cluster(logs: Path) -> Iterator[RayCluster]:
    """A head of no CPUs with its dashboard and two worker nodes of one CPU, stopped (killed) after."""
    temp = Path(tempfile.mkdtemp(prefix="jrc", dir="/tmp"))  # short: Ray's Unix sockets live in it
    sessions = Sessions(logs)
    env = ray_env()
    port, dashboard = free_port(), free_port()
    common = ["--node-ip-address", "127.0.0.1", "--object-store-memory", str(OBJECT_STORE)]
    common += ["--disable-usage-stats", "--block"]
    head = [str(BIN / "ray"), "start", "--head", "--port", str(port), "--num-cpus", "0", *common]
    head += ["--include-dashboard", "true", "--dashboard-host", "127.0.0.1"]
    head += ["--dashboard-port", str(dashboard), "--dashboard-agent-listen-port", str(free_port())]
    head += ["--temp-dir", str(temp)]
    started = time.monotonic()
    try:
        sessions.start("head", head, env)
        wait_for("the head's dashboard", lambda: accepts(dashboard), NODE_WAIT)
        # One node at a time: two raylets starting at once on one machine took the same socket name
        # in the session's folder, and one aborted.
        for nodes, name in enumerate(("worker1", "worker2"), start=2):
            worker = [str(BIN / "ray"), "start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1", *common]
            sessions.start(name, [*worker, "--dashboard-agent-listen-port", str(free_port())], env)
            count = subprocess.run(
                [sys.executable, "-c", NODES, f"127.0.0.1:{port}", str(nodes), str(NODE_WAIT)],
                capture_output=True,
                text=True,
                env=env,
                timeout=NODE_WAIT + 60,
            )
            assert count.returncode == 0, count.stderr[-2000:] + sessions.log(name)[-2000:]
        cluster = RayCluster(f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard}", sessions, env)
        cluster.started_s = time.monotonic() - started
        yield cluster
    finally:
        sessions.close()
        shutil.rmtree(temp, ignore_errors=True)


def _ray(cluster: RayCluster, *arguments: str) -> subprocess.CompletedProcess[str]:
    command = [str(BIN / "ray"), *arguments]
    return subprocess.run(command, capture_output=True, text=True, env=cluster.env, timeout=120)


def job_status(cluster: RayCluster, submission: str) -> str:
    done = _ray(cluster, "job", "status", "--address", cluster.dashboard, submission)
    said = done.stdout + done.stderr  # Ray's command line logger writes the status to stderr
    # A job that has ended is said in words of its own (ray/dashboard/modules/job/cli.py).
    ended = {"SUCCEEDED": "succeeded", "STOPPED": "was stopped", "FAILED": "failed"}
    for status, words in ended.items():
        if f"Job '{submission}' {words}" in said:
            return status
    for status in ("RUNNING", "PENDING", *ended):
        if f"Status for job '{submission}': {status}" in said:
            return status
    return "UNKNOWN"


def job_logs(cluster: RayCluster, submission: str) -> str:
    done = _ray(cluster, "job", "logs", "--address", cluster.dashboard, submission)
    return done.stdout + done.stderr


def stop_job(cluster: RayCluster, submission: str) -> None:
    """``ray job stop``: the job's driver is sent SIGTERM (and SIGKILL if it lingers)."""
    done = _ray(cluster, "job", "stop", "--address", cluster.dashboard, submission)
    assert done.returncode == 0, done.stdout + done.stderr


def submit(cluster: RayCluster, submission: str, job: Path | None, entrypoint: list[str]) -> None:
    """``ray job submit --no-wait``: jevper in the runtime environment's py_modules, ``job`` (if any)
    the working directory."""
    runtime = {"py_modules": [str(ROOT / "jevper")], "excludes": ["__pycache__"]}
    command = ["job", "submit", "--address", cluster.dashboard, "--no-wait", "--submission-id", submission]
    command += ["--working-dir", str(job)] if job is not None else []
    command += ["--runtime-env-json", json.dumps(runtime), "--", *entrypoint]
    done = _ray(cluster, *command)
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


@dataclass(frozen=True)
class NodeKilled:
    """A submitted job whose worker node was killed: its submissions' statuses and logs, the kill, and
    the seconds from the submission to the kill and to the job's success."""

    statuses: list[str]
    logs: list[str]
    kill: Kill
    killed: int  # processes the kill ended
    kill_s: float
    end_s: float


def job_with_a_node_killed(
    cluster: RayCluster,
    asked: Callable[[], int],
    folder: Path,
    source: Path,
    questions: dict[str, object],
    urls: list[str],
    model: str,
    at: int = 40,
) -> NodeKilled:
    """Submit JOB over ``source`` (parts in ``folder/parts``, its checkpoint beside), kill the worker node
    hosting a pool actor once ``at`` requests were made, and wait for the job's end; a job that did not
    succeed is submitted again, to resume from Ray's checkpoint."""
    job = folder / "job"
    job.mkdir(parents=True)
    (job / "job.py").write_text(JOB)
    (job / "questions.json").write_text(json.dumps(questions))
    arguments = [str(source), str(folder / "parts"), str(folder / "checkpoint"), ",".join(urls), model]
    started = time.monotonic()
    submit(cluster, "classify-1", job, ["python", "job.py", *arguments])
    killed = 0

    def kill() -> str:
        nonlocal killed
        assert job_status(cluster, "classify-1") == "RUNNING", job_logs(cluster, "classify-1")[-3000:]
        victim = node_of_an_actor(cluster)
        assert victim is not None, "no worker node hosts an actor of the pool"
        killed = cluster.sessions.kill(victim)
        return victim

    kill = kill_mid_job(asked, at, lambda: job_status(cluster, "classify-1") in ENDED, kill)
    statuses = [finished(cluster, "classify-1")]
    logs = [job_logs(cluster, "classify-1")]
    if statuses[-1] != "SUCCEEDED":
        submit(cluster, "classify-2", job, ["python", "job.py", *arguments])  # resumes from the checkpoint
        statuses.append(finished(cluster, "classify-2"))
        logs.append(job_logs(cluster, "classify-2"))
    return NodeKilled(statuses, logs, kill, killed, kill.at - started, time.monotonic() - started)
