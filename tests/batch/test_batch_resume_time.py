"""A run resumed after SIGKILL goes at the pace of a full run: what it reads back of the killed run (the
manifest, the committed parts, each batch's journal) costs it no pace per row. Offline, against the fault
server, which answers at once, so the pace is the batch's own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from _batch_data import QUESTIONS, posts

from jevper.batch.cli import main
from jevper.testing.faults import FaultServer


def test_a_resume_after_sigkill_asks_its_rows_at_least_half_as_fast_as_a_full_run(
    faults: FaultServer, tmp_path: Path
) -> None:
    n = 600
    rows = tmp_path / "in.jsonl"
    rows.write_text(
        "".join(json.dumps({"id": i, "state": f"ticket {i}: charged twice"}) + "\n" for i in range(n))
    )
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))

    def command(output: str, *more: str) -> list[str]:
        return [
            str(rows), output, "--questions", str(questions), "--base-url", faults.base_url(), "--model",
            "fault-model", "--api", "systemone", "--concurrency", "4", "--no-progress",
            *more,
        ]  # fmt: skip

    started = time.perf_counter()
    assert main(command(str(tmp_path / "full.parquet"))) == 0
    full = time.perf_counter() - started

    before = posts(faults)
    killed = subprocess.Popen(
        [sys.executable, "-m", "jevper.batch", *command(str(tmp_path / "out.parquet"))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while posts(faults) - before < n // 3 and time.monotonic() < deadline and killed.poll() is None:
        time.sleep(0.01)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(10)
    asked_first = posts(faults) - before
    assert n // 3 <= asked_first < n, "the first run was not killed mid-way"

    started = time.perf_counter()
    assert main(command(str(tmp_path / "out.parquet"), "--resume")) == 0
    resumed = time.perf_counter() - started
    assert pq.read_table(tmp_path / "out.parquet").column("id").to_pylist() == list(range(n))
    left = n - asked_first
    # Rows per second: the resume's at least half the full run's (plus a second for its start).
    assert resumed <= 2 * full * left / n + 1.0, (
        f"a full run took {full:.2f} s for {n} rows, the resume {resumed:.2f} s for about {left}"
    )
