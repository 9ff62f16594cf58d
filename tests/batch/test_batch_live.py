"""Live (marker `live`): the batch core on the embedded llama.cpp. Its answers equal the blocking
client's row by row; with two servers, one SIGKILLed mid-run costs no row; --spawn runs end to end."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _batch_data import QUESTIONS
from _llama import RECIPE_ONE_THREAD
from openai import OpenAI

from jevper import SystemOneClient
from jevper._upstreams import UpstreamStatus
from jevper.batch import BatchClassifier, Server
from jevper.servers import SpawnedServer
from jevper.servers.llamacpp import spawn_llamacpp

pytestmark = pytest.mark.live

TICKETS = [
    "I was charged twice for my subscription this month and I need the money back today.",
    "The app crashes when I open the settings page.",
    "This is the third time I write: refund me or I cancel everything!",
    "My invoice shows a fee I do not recognise.",
]
#: Generous: two cores shared with other servers can hold a request for tens of seconds.
TIMEOUT = 300.0
#: Greedy decoding on both sides, so the server is asked exactly the same thing twice.
GREEDY = {"temperature": 0}
#: The least tolerance: a server whose two passes agree to the last digit still formats its logprobs
#: to a few decimals, and the batch asks two rows at a time where the client asks one.
FLOOR = 1e-3


def tickets(n: int) -> pa.RecordBatch:
    """``n`` rows, each state its own (the batch asks a state it has seen once, so a repeated one would send
    no request of its own)."""
    states = [TICKETS[i % len(TICKETS)] + ("" if i < len(TICKETS) else f" (ticket {i})") for i in range(n)]
    return pa.record_batch({"id": list(range(n)), "state": states})


def test_batch_answers_equal_the_blocking_clients_row_by_row(llamacpp: SpawnedServer) -> None:
    batch = tickets(len(TICKETS))
    batcher = BatchClassifier(
        QUESTIONS,
        [Server(llamacpp.base_url, llamacpp.model, slots=2)],
        api="chat_completions",
        extra_body=GREEDY,
    )
    try:
        rows = batcher.classify_sync(batch).to_pylist()
    finally:
        batcher.close()
    client = SystemOneClient(
        OpenAI(base_url=llamacpp.base_url, api_key="none"), model=llamacpp.model, timeout=TIMEOUT
    )

    def ask(state: str) -> dict[str, Any]:
        answered = client.system_one(
            state=state, questions=QUESTIONS, api="chat_completions", extra_body=GREEDY
        )
        return answered.to_api()["answers"]

    first = [ask(state) for state in TICKETS]
    # The server's own run-to-run noise: the same requests again, in the other order (as the batch's
    # order differs too, so its prompt cache holds other prefixes when each row comes).
    second = [ask(state) for state in reversed(TICKETS)][::-1]
    noise = max(_gap(a, b) for a, b in zip(first, second, strict=True))
    apart = max(_gap(_plain(row), answers) for row, answers in zip(rows, first, strict=True))
    tolerance = max(2 * noise, FLOOR)
    # Shown with -s, and kept in the test's report (--junitxml, or -rA's captured output).
    print(
        f"server run-to-run noise {noise:.3g} (the largest probability gap between two passes of the "
        f"blocking client over {len(TICKETS)} rows, {_count(first[0])} probabilities each); tolerance "
        f"max(2 x noise, {FLOOR:g}) = {tolerance:.3g}; batch against the client {apart:.3g}"
    )
    for row, answers in zip(rows, first, strict=True):
        assert row["error"] is None
        assert row["topic"]["choice"] == answers["topic"]["choice"]
        assert _peak(_plain(row)["anger"]) == _peak(answers["anger"])
        assert _gap(_plain(row), answers) <= tolerance, (row, answers, noise)


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A batch row's answers as the API shapes them (maps back to objects)."""
    out: dict[str, Any] = {}
    for qid in QUESTIONS:
        answer = dict(row[qid])
        for key in ("probabilities", "legend"):
            if key in answer:
                answer[key] = dict(answer[key])
        out[qid] = answer
    return out


def _peak(score: dict[str, Any]) -> str:
    """A score's most probable level (its choice, as a choice has one)."""
    probabilities: dict[str, float] = score["probabilities"]
    return max(probabilities, key=lambda level: probabilities[level])


def _count(answers: dict[str, Any]) -> int:
    return 1 + sum(len(answers[qid]["probabilities"]) for qid in ("topic", "anger"))


def _gap(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest difference between two answers' probabilities (a noul's is its probability of yes)."""
    gaps = [abs(a["urgent"]["noul"] - b["urgent"]["noul"])]
    for qid in ("topic", "anger"):
        pa_, pb = a[qid]["probabilities"], b[qid]["probabilities"]
        gaps += [abs(pa_[k] - pb[k]) for k in pa_]
    return max(gaps)


def test_a_server_sigkilled_mid_run_costs_time_not_rows() -> None:
    one_question = {"urgent": QUESTIONS["urgent"]}
    n = 24
    with spawn_llamacpp(extra_args=RECIPE_ONE_THREAD) as a, spawn_llamacpp(extra_args=RECIPE_ONE_THREAD) as b:
        servers = [Server(a.base_url, a.model, slots=1), Server(b.base_url, b.model, slots=1)]
        batcher = BatchClassifier(one_question, servers, api="chat_completions", timeout=TIMEOUT)

        async def run_and_kill() -> pa.RecordBatch:
            task = asyncio.ensure_future(batcher.classify(tickets(n)))
            async with asyncio.timeout(300):  # a run that never reaches its fourth answer fails, not hangs
                while batcher.upstreams is None or batcher.upstreams.status()[0].succeeded < 4:
                    await asyncio.sleep(0.02)
            os.kill(int(a.extra["pid"]), signal.SIGKILL)
            try:
                return await asyncio.wait_for(task, 600)
            finally:
                status.extend(batcher.upstreams.status())
                await batcher.aclose()

        status: list[UpstreamStatus] = []
        out = asyncio.run(run_and_kill())
    rows = out.to_pylist()
    assert [row["id"] for row in rows] == list(range(n))
    assert [row["error"] for row in rows] == [None] * n
    killed, kept = status
    assert killed.failed >= 1 and killed.succeeded >= 4
    assert kept.succeeded + killed.succeeded == n


def test_spawn_runs_a_file_through_the_embedded_server(tmp_path: Path) -> None:
    (tmp_path / "q.json").write_text(json.dumps({"questions": {"topic": QUESTIONS["topic"]}}))
    with (tmp_path / "in.jsonl").open("w") as f:
        for i, text in enumerate(TICKETS[:3]):
            f.write(json.dumps({"id": f"t{i}", "state": text}) + "\n")
    command = [sys.executable, "-m", "jevper.batch", "in.jsonl", "out.parquet", "--questions", "q.json"]
    spawn = ["--spawn", "--release", "b11549", "--concurrency", "2"]
    done = subprocess.run(
        [*command, *spawn, "--api", "chat_completions", "--timeout", str(TIMEOUT)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("jevper.batch: 3 rows, 3 answered, 0 errors")
    out = pq.read_table(tmp_path / "out.parquet")
    assert out.column("id").to_pylist() == ["t0", "t1", "t2"]
    assert set(out.column("topic").combine_chunks().flatten()[1].to_pylist()) <= {"billing", "other"}
