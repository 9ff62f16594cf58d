"""The batch on a Spark standalone cluster started with Spark's own launcher classes (_spark_nodes.py):
the command line joins it with ``--engine spark --engine-address spark://...``; a job goes in by
``spark-submit --master spark://...``, and one of its executors is killed mid-job: Spark runs the lost
tasks again and every row is written exactly once (Spark keeps nothing of a stopped job, so there is no
``--resume`` on it: a job that fails is run again whole). Runs with scripts/cluster, inside a
loopback-only network namespace.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from _cluster import QUESTION, Requests, loopback_only, once, write_rows
from _spark_nodes import SparkCluster, command_line_env, job_with_an_executor_killed, spark_cluster

from jevper.servers import SpawnedServer

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    loopback_only()
    with spark_cluster(tmp_path_factory.mktemp("spark-logs")) as cluster:
        yield cluster


def test_the_command_line_on_the_spark_cluster_answers_every_row_once(
    spark: SparkCluster, cluster_llama: SpawnedServer, tmp_path: Path
) -> None:
    source, output, questions = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "q.json"
    write_rows(source, 60)
    questions.write_text(json.dumps(QUESTION))
    command = [sys.executable, "-m", "jevper.batch", str(source), str(output), "--questions", str(questions)]
    command += ["--base-url", cluster_llama.base_url, "--model", cluster_llama.model, "--timeout", "300"]
    command += ["--engine", "spark", "--engine-address", spark.master, "--workers", "2"]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=command_line_env(spark), timeout=600)
    print(f"the command line on the cluster: {time.monotonic() - started:.1f} s; {done.stdout.strip()}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "60 rows, 60 answered" in done.stdout
    once([json.loads(line) for line in output.read_text().splitlines()], 60)


def test_a_submitted_job_survives_an_executor_killed_mid_job_with_every_row_once(
    spark: SparkCluster, cluster_llama: SpawnedServer, tmp_path: Path
) -> None:
    n = 200
    write_rows(tmp_path / "in.jsonl", n)
    asked = Requests(cluster_llama.log_path)
    run = job_with_an_executor_killed(
        spark, asked, tmp_path, tmp_path / "in.jsonl", QUESTION, [cluster_llama.base_url], cluster_llama.model
    )
    print(
        f"spark-submit: exit {run.status} after {run.end_s:.1f} s, {run.end_s - run.kill_s:.1f} s after "
        f"killing {run.kill.what} at {run.kill.at_requests} requests; {asked()} requests for {n} rows"
    )
    assert run.status == 0, run.said[-3000:]
    assert "master: spark://127.0.0.1:" in run.said
    assert "job finished" in run.said
    assert "lost" in run.said.lower(), run.said[-3000:]  # the kill hit a running executor
    once(
        [
            row
            for path in sorted((tmp_path / "out").glob("*.parquet"))
            for row in pq.read_table(path).to_pylist()
        ],
        n,
    )
