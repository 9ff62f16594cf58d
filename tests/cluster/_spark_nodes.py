"""A Spark standalone cluster started with Spark's own launcher classes, for the cluster tests and the
cluster benchmark: a master and two workers of one core each (``spark-class
org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), every process on 127.0.0.1
(``SPARK_LOCAL_IP``), the executors' Python the driver's own interpreter (``PYSPARK_PYTHON``: the same
path on every node); a job sent by ``spark-submit --master spark://...`` with one executor killed
mid-job."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
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

#: What every JVM of a run may take: two executors and a driver beside other work on 24 GB.
EXECUTOR_MEMORY = "512m"

#: The job a user submits with spark-submit: the session is the one spark-submit configured.
JOB = """
import json
import sys

from jevper.batch import spark as jspark

source, target, questions, base_url, model = sys.argv[1:6]
session = jspark.session()
print("master:", session.sparkContext.master, flush=True)
frame = session.read.json(source)
servers = [{"base_url": url, "model": model, "slots": 4} for url in base_url.split(",")]
asked = json.loads(open(questions).read())
jspark.classify_dataframe(frame, asked, servers, tasks=2, timeout=300.0).write.parquet(target)
print("job finished", flush=True)
session.stop()
"""


@dataclass
class SparkCluster:
    master: str  # spark://127.0.0.1:PORT
    sessions: Sessions
    env: dict[str, str]
    started_s: float = 0.0  # seconds from the master's start to two workers alive


def spark_env() -> dict[str, str]:
    """A user's shell on a node: the venv's commands first, every Spark process on loopback, the
    executors' Python this interpreter."""
    return {
        **os.environ,
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def command_line_env(cluster: SparkCluster) -> dict[str, str]:
    """The environment of ``python -m jevper.batch --engine spark`` on the cluster: executors of
    EXECUTOR_MEMORY."""
    arguments = f"--conf spark.executor.memory={EXECUTOR_MEMORY} pyspark-shell"
    return {**cluster.env, "PYSPARK_SUBMIT_ARGS": arguments}


def alive_workers(ui: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as answer:
            return int(json.load(answer).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


@contextlib.contextmanager
def spark_cluster(logs: Path) -> Iterator[SparkCluster]:
    """A master and two workers of one core (their work folders under ``logs``), killed after."""
    sessions, env = Sessions(logs), spark_env()
    port, ui = free_port(), free_port()
    launcher = [str(BIN / "spark-class")]
    started = time.monotonic()
    try:
        master = [*launcher, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        sessions.start("master", [*master, "--port", str(port), "--webui-port", str(ui)], env)
        wait_for("the Spark master", lambda: accepts(port) and accepts(ui), NODE_WAIT)
        for name in ("worker1", "worker2"):
            work = logs / f"{name}-work"
            work.mkdir()
            worker = [*launcher, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"]
            worker += ["--cores", "1", "--memory", "1g", "--webui-port", str(free_port())]
            worker += ["--work-dir", str(work), f"spark://127.0.0.1:{port}"]
            sessions.start(name, worker, env)
        wait_for("two Spark workers", lambda: alive_workers(ui) == 2, NODE_WAIT)
        cluster = SparkCluster(f"spark://127.0.0.1:{port}", sessions, env)
        cluster.started_s = time.monotonic() - started
        yield cluster
    finally:
        sessions.close()


def executors(sessions: Sessions) -> list[int]:
    """The executor JVMs the workers launched."""
    found = []
    for name in ("worker1", "worker2"):
        for pid in sessions.pids(name):
            try:
                line = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"CoarseGrainedExecutorBackend" in line:
                found.append(pid)
    return sorted(found)


@dataclass(frozen=True)
class ExecutorKilled:
    """A spark-submit job with an executor killed: its exit status and output, the kill, and the seconds
    from the submission to the kill and to the job's end."""

    status: int
    said: str
    kill: Kill
    kill_s: float
    end_s: float


def job_with_an_executor_killed(
    cluster: SparkCluster,
    asked: Callable[[], int],
    folder: Path,
    source: Path,
    questions: dict[str, object],
    urls: list[str],
    model: str,
    at: int = 40,
) -> ExecutorKilled:
    """``spark-submit`` JOB over ``source`` (Parquet parts into ``folder/out``), SIGKILL an executor once
    ``at`` requests were made, and wait for the job's end."""
    job, asked_file, log = folder / "job.py", folder / "questions.json", folder / "submit.log"
    job.write_text(JOB)
    asked_file.write_text(json.dumps(questions))
    command = [str(BIN / "spark-submit"), "--master", cluster.master]
    command += ["--conf", f"spark.executor.memory={EXECUTOR_MEMORY}", "--conf", "spark.ui.enabled=false"]
    command += [str(job), str(source), str(folder / "out"), str(asked_file), ",".join(urls), model]
    started = time.monotonic()
    with log.open("wb") as out:
        submitted = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=cluster.env)

    def kill() -> str:
        victims = executors(cluster.sessions)
        assert victims, "no executor to kill"
        os.kill(victims[0], signal.SIGKILL)
        return f"executor {victims[0]}"

    try:
        kill = kill_mid_job(asked, at, lambda: submitted.poll() is not None, kill)
        status = submitted.wait(timeout=JOB_WAIT)
    finally:
        if submitted.poll() is None:
            submitted.kill()
    said = log.read_text(errors="replace")
    return ExecutorKilled(status, said, kill, kill.at - started, time.monotonic() - started)
