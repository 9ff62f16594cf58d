"""The batch spends only on what it has not asked: each distinct state once per run (across batches too),
the answer written to every row carrying it; with ``cache=``, a rerun answered from the file without a
request; the command line's summary says both."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _batch_data import QUESTIONS, posts

from jevper.batch import BatchClassifier, Server
from jevper.batch.cli import main
from jevper.testing.faults import FaultServer, running


def rows(states: list[str]) -> pa.RecordBatch:
    return pa.record_batch({"id": list(range(len(states))), "state": states})


def classified(
    server: FaultServer, batches: list[pa.RecordBatch], **options: Any
) -> tuple[BatchClassifier, list[pa.RecordBatch]]:
    batcher = BatchClassifier(
        QUESTIONS, [Server(server.base_url(), "fault-model", slots=2)], api="systemone", **options
    )

    async def run() -> list[pa.RecordBatch]:
        try:
            return [await batcher.classify(batch) for batch in batches]
        finally:
            await batcher.aclose()

    return batcher, asyncio.run(run())


def test_each_distinct_state_is_asked_once_and_its_answer_written_to_every_row_carrying_it() -> None:
    states = [f"ticket {i % 4}: charged twice" for i in range(12)]  # four distinct, each three times
    with running() as server:
        batcher, (out,) = classified(server, [rows(states)])
        assert posts(server) == 4
    assert batcher.duplicates == 8 and batcher.requests_sent == 4
    answers = out.column("topic").to_pylist()
    assert all(answers[i] == answers[i % 4] for i in range(12))
    usage = out.column("usage").to_pylist()
    assert sum(1 for u in usage if u["input_tokens"]) == 4  # the duplicates cost nothing
    assert out.column("error").null_count == 12


def test_a_state_answered_in_an_earlier_batch_of_the_run_is_not_asked_again() -> None:
    with running() as server:
        batcher, outs = classified(server, [rows(["a", "b"]), rows(["b", "c", "a"])])
        assert posts(server) == 3
    assert batcher.duplicates == 2
    assert outs[1].column("topic").to_pylist()[2] == outs[0].column("topic").to_pylist()[0]


def test_a_rerun_with_the_cache_sends_no_request_and_gives_the_same_answers(tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    states = [f"ticket {i}" for i in range(6)]
    with running() as server:
        first, (out,) = classified(server, [rows(states)], cache=path)
        assert posts(server) == 6 and first.cache_hits == 0
        again, (rerun,) = classified(server, [rows(states)], cache=path)
        assert posts(server) == 6
    assert again.cache_hits == 6 and again.requests_sent == 0
    for qid in QUESTIONS:
        assert rerun.column(qid).to_pylist() == out.column(qid).to_pylist()


def test_the_cache_mode_write_asks_every_row_again(tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    with running() as server:
        classified(server, [rows(["a", "b"])], cache=path)
        writer, _ = classified(server, [rows(["a", "b"])], cache=path, cache_mode="write")
        assert posts(server) == 4 and writer.cache_hits == 0


@pytest.fixture
def run_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., tuple[int, str]]:
    def run(*args: str | Path, cwd: Path) -> tuple[int, str]:
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        status = main([str(a) for a in args])
        return status, capsys.readouterr().out

    return run


def test_the_command_line_s_summary_says_the_duplicates_and_the_cache_hits(
    tmp_path: Path, run_cli: Callable[..., tuple[int, str]]
) -> None:
    (tmp_path / "questions.json").write_text(json.dumps(QUESTIONS))
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "state": f"ticket {i % 3}"}) + "\n" for i in range(9)))
    with running() as server:
        asked = ["--questions", "questions.json", "--base-url", server.base_url(), "--model", "fault-model"]
        asked += ["--api", "systemone", "--cache", "answers.sqlite"]
        status, said = run_cli(source, "one.parquet", *asked, cwd=tmp_path)
        assert status == 0 and posts(server) == 3
        assert said.splitlines()[1] == (
            "jevper.batch: 6 duplicate rows answered as their first; 0 answered from the cache "
            "answers.sqlite (read-write)"
        )
        status, said = run_cli(source, "two.parquet", *asked, cwd=tmp_path)
        assert status == 0 and posts(server) == 3
        assert said.splitlines()[1] == (
            "jevper.batch: 6 duplicate rows answered as their first; 3 answered from the cache "
            "answers.sqlite (read-write)"
        )
    one, two = pq.read_table(tmp_path / "one.parquet"), pq.read_table(tmp_path / "two.parquet")
    assert one.column("topic").to_pylist() == two.column("topic").to_pylist()
