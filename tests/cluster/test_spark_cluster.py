"""The batch on a Spark standalone cluster started with Spark's own launcher classes: a master and two
workers of one core each (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``),
every process on 127.0.0.1 (``SPARK_LOCAL_IP``), the executors' Python the driver's own interpreter
(``PYSPARK_PYTHON``: the same path on every node). The command line joins it with ``--engine spark
--engine-address spark://...``; a job goes in by ``spark-submit --master spark://...``, and one of its
executors is killed mid-job: Spark runs the lost tasks again and every row is written exactly once.
Runs with scripts/cluster, inside a loopback-only network namespace.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _cluster import BIN, Sessions, accepts, free_port, loopback_only, wait_for

from jevper.servers import SpawnedServer

pytestmark = pytest.mark.cluster

QUESTION = {
    "topic": {"type": "choice", "criteria": {"billing": "a charge", "bug": "a crash", "other": "else"}}
}
_WHAT = ("charged twice", "app crashes", "office hours?", "refund please")
NODE_WAIT, JOB_WAIT = 120, 900
#: What every JVM of the test may take: two executors and a driver beside other work on 24 GB.
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
server = {"base_url": base_url, "model": model, "slots": 4}
asked = json.loads(open(questions).read())
jspark.classify_dataframe(frame, asked, [server], tasks=2, timeout=300.0).write.parquet(target)
print("job finished", flush=True)
session.stop()
"""


@dataclass
class SparkCluster:
    master: str  # spark://127.0.0.1:PORT
    sessions: Sessions
    env: dict[str, str]


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


def alive_workers(ui: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as answer:
            return int(json.load(answer).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    loopback_only()
    logs = tmp_path_factory.mktemp("spark-logs")
    sessions, env = Sessions(logs), spark_env()
    port, ui = free_port(), free_port()
    launcher = [str(BIN / "spark-class")]
    try:
        master = [*launcher, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        sessions.start("master", [*master, "--port", str(port), "--webui-port", str(ui)], env)
        wait_for("the Spark master", lambda: accepts(port) and accepts(ui), NODE_WAIT)
        for name in ("worker1", "worker2"):
            worker = [*launcher, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"]
            worker += ["--cores", "1", "--memory", "1g", "--webui-port", str(free_port())]
            worker += ["--work-dir", str(tmp_path_factory.mktemp(name)), f"spark://127.0.0.1:{port}"]
            sessions.start(name, worker, env)
        wait_for("two Spark workers", lambda: alive_workers(ui) == 2, NODE_WAIT)
        yield SparkCluster(f"spark://127.0.0.1:{port}", sessions, env)
    finally:
        sessions.close()


def write_rows(path: Path, n: int) -> None:
    path.write_text("".join(json.dumps({"id": i, "state": f"#{i}: {_WHAT[i % 4]}"}) + "\n" for i in range(n)))


def once(rows: list[dict[str, Any]], n: int) -> None:
    """Every id of ``range(n)`` exactly once, each answered."""
    ids = sorted(row["id"] for row in rows)
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} rows came back twice"
    assert ids == list(range(n)), f"missing: {sorted(set(range(n)) - set(ids))[:10]}"
    errors = [row["error"] for row in rows if row["error"] is not None]
    assert not errors, errors[:3]


def test_the_command_line_on_the_spark_cluster_answers_every_row_once(
    spark_cluster: SparkCluster, cluster_llama: SpawnedServer, tmp_path: Path
) -> None:
    source, output, questions = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "q.json"
    write_rows(source, 60)
    questions.write_text(json.dumps(QUESTION))
    command = [sys.executable, "-m", "jevper.batch", str(source), str(output), "--questions", str(questions)]
    command += ["--base-url", cluster_llama.base_url, "--model", cluster_llama.model, "--timeout", "300"]
    command += ["--engine", "spark", "--engine-address", spark_cluster.master, "--workers", "2"]
    env = {
        **spark_cluster.env,
        "PYSPARK_SUBMIT_ARGS": f"--conf spark.executor.memory={EXECUTOR_MEMORY} pyspark-shell",
    }
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    print(f"the command line on the cluster: {time.monotonic() - started:.1f} s; {done.stdout.strip()}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "60 rows, 60 answered" in done.stdout
    once([json.loads(line) for line in output.read_text().splitlines()], 60)


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


def test_a_submitted_job_survives_an_executor_killed_mid_job_with_every_row_once(
    spark_cluster: SparkCluster, cluster_llama: SpawnedServer, tmp_path: Path
) -> None:
    n = 200
    source, target, questions, job = (tmp_path / name for name in ("in.jsonl", "out", "q.json", "job.py"))
    write_rows(source, n)
    questions.write_text(json.dumps(QUESTION))
    job.write_text(JOB)

    def asked() -> int:
        return cluster_llama.log_path.read_text(errors="replace").count("processing task")

    before = asked()
    command = [str(BIN / "spark-submit"), "--master", spark_cluster.master]
    command += ["--conf", f"spark.executor.memory={EXECUTOR_MEMORY}", "--conf", "spark.ui.enabled=false"]
    command += [
        str(job),
        str(source),
        str(target),
        str(questions),
        cluster_llama.base_url,
        cluster_llama.model,
    ]
    log = tmp_path / "submit.log"
    started = time.monotonic()
    with log.open("wb") as out:
        submitted = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=spark_cluster.env)
    try:
        wait_for("40 rows asked", lambda: asked() - before >= 40, JOB_WAIT)
        victims = executors(spark_cluster.sessions)
        assert victims, "no executor to kill"
        os.kill(victims[0], signal.SIGKILL)
        killed_at, asked_at_kill = time.monotonic(), asked() - before
        status = submitted.wait(timeout=JOB_WAIT)
    finally:
        if submitted.poll() is None:
            submitted.kill()
    said = log.read_text(errors="replace")
    total = asked() - before
    print(
        f"spark-submit: exit {status} after {time.monotonic() - started:.1f} s, "
        f"{time.monotonic() - killed_at:.1f} s after killing executor {victims[0]} at {asked_at_kill} "
        f"requests; {total} requests for {n} rows"
    )
    assert status == 0, said[-3000:]
    assert "master: spark://127.0.0.1:" in said
    assert "job finished" in said
    assert "lost" in said.lower(), said[-3000:]  # the kill hit a running executor
    once([row for path in sorted(target.glob("*.parquet")) for row in pq.read_table(path).to_pylist()], n)
