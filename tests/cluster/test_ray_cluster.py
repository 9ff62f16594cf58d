"""The batch on a Ray cluster started as its users start one (_ray_nodes.py: ``ray start``, a head and two
worker nodes, token authentication on). The command line joins it with ``--engine-address``; the command
line sent as a job by ``ray job submit`` and stopped mid-job leaves its committed parts and manifest, and
``--resume`` finishes it exactly once; a job whose worker node is killed whole mid-job still writes every
row exactly once (at once, or after the job is submitted again and resumes from Ray's checkpoint). The
node-kill test runs last: the cluster has one worker node after it. Runs with scripts/cluster, inside a
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
from _cluster import QUESTION, Requests, loopback_only, once, wait_for, write_rows
from _ray_nodes import (
    ROOT,
    RayCluster,
    finished,
    job_logs,
    job_status,
    job_with_a_node_killed,
    ray_cluster,
    stop_job,
    submit,
)

from jevper.servers import SpawnedServer

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    loopback_only()
    with ray_cluster(tmp_path_factory.mktemp("ray-logs")) as cluster:
        yield cluster


def test_the_command_line_joined_to_the_cluster_answers_every_row_once(
    ray: RayCluster, cluster_llama: SpawnedServer, tmp_path: Path
) -> None:
    source, output, questions = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "q.json"
    write_rows(source, 60)
    questions.write_text(json.dumps(QUESTION))
    command = [sys.executable, "-m", "jevper.batch", str(source), str(output), "--questions", str(questions)]
    command += ["--base-url", cluster_llama.base_url, "--model", cluster_llama.model, "--timeout", "300"]
    command += ["--engine", "ray", "--engine-address", ray.address, "--workers", "2"]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=ray.env, timeout=600)
    print(f"the command line on the cluster: {time.monotonic() - started:.1f} s; {done.stdout.strip()}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "60 rows, 60 answered" in done.stdout
    once([json.loads(line) for line in output.read_text().splitlines()], 60)


def committed_rows(parts: Path) -> int:
    """Rows in the whole parts a stopped run left (a part being written when it stopped is no part)."""
    total = 0
    for path in parts.glob("*.parquet"):
        try:
            total += pq.read_metadata(path).num_rows
        except (OSError, ValueError):
            continue
    return total


def test_the_command_line_as_a_job_stopped_mid_way_is_finished_exactly_once_by_resume(
    ray: RayCluster, cluster_llama: SpawnedServer, tmp_path: Path
) -> None:
    # 200 rows in parts of 10: the stop finds parts committed and rows still to ask.
    n, block = 200, 10
    data = tmp_path / "data"  # where the job's user says: a path every node of this machine reaches
    data.mkdir()
    source, output, questions = data / "in.jsonl", data / "out.parquet", data / "q.json"
    write_rows(source, n)
    questions.write_text(json.dumps(QUESTION))
    entry = ["python", "-m", "jevper.batch", str(source), str(output), "--questions", str(questions)]
    entry += ["--base-url", cluster_llama.base_url, "--model", cluster_llama.model, "--timeout", "300"]
    entry += ["--engine", "ray", "--workers", "2", "--batch-rows", str(block)]  # RAY_ADDRESS: the job's
    parts, run = data / "out.parquet.ray-parts", data / "out.parquet.ray-run"
    asked = Requests(cluster_llama.log_path)
    submit(ray, "cli-1", None, entry)
    wait_for(
        "three parts committed (or the job's end)",
        lambda: committed_rows(parts) >= 3 * block or job_status(ray, "cli-1") in ("SUCCEEDED", "FAILED"),
        600,
        every=2,
    )
    stop_job(ray, "cli-1")
    status = finished(ray, "cli-1")
    asked_first, committed = asked(), committed_rows(parts)
    print(f"first job: {status} after {asked_first} requests, {committed} rows committed in parts")
    assert status == "STOPPED", job_logs(ray, "cli-1")[-3000:]
    assert not output.exists()
    assert json.loads((run / "manifest.json").read_text())["input"] == str(source)
    assert 3 * block <= committed < n, committed
    submit(ray, "cli-2", None, [*entry, "--resume"])
    status = finished(ray, "cli-2")
    logs = job_logs(ray, "cli-2")
    asked_again = asked() - asked_first
    print(f"--resume: {status}, {asked_again} requests\n{logs[-1500:]}")
    assert status == "SUCCEEDED", logs[-3000:]
    assert f"{n} rows, {n} answered" in logs
    # Only the rows with no committed result were asked again, and each row is written once.
    assert asked_again <= n - committed, (asked_first, committed, asked_again)
    once(pq.read_table(output).to_pylist(), n)
    assert not parts.exists() and not run.exists()


def test_a_submitted_job_survives_a_worker_node_killed_mid_job_with_every_row_once(
    ray: RayCluster, cluster_llama: SpawnedServer, tmp_path: Path
) -> None:
    n = 200
    write_rows(tmp_path / "in.jsonl", n)
    asked = Requests(cluster_llama.log_path)
    run = job_with_a_node_killed(
        ray, asked, tmp_path, tmp_path / "in.jsonl", QUESTION, [cluster_llama.base_url], cluster_llama.model
    )
    print(
        f"killed {run.kill.what} ({run.killed} processes) at {run.kill.at_requests} requests; "
        f"{' then '.join(run.statuses)}, {run.end_s - run.kill_s:.1f} s after the kill; "
        f"{asked()} requests for {n} rows\n{run.logs[0][-3000:]}"
    )
    logs = run.logs[0]
    assert f"driver's jevper: {ROOT}" not in logs and "driver's jevper: " in logs  # the shipped copy
    assert f"worker's jevper: {ROOT}" not in logs and "worker's jevper: " in logs
    assert run.statuses[-1] == "SUCCEEDED", run.logs[-1][-3000:]
    parts = sorted((tmp_path / "parts").glob("*.parquet"))
    once([row for path in parts for row in pq.read_table(path).to_pylist()], n)
