"""`python -m jevper.evaluate --cache FILE` and `--dry-run`, against the fault server (which answers at
once and has no tokenizer): an evaluation asked again with the cache sends no question and gives the same
figures; the dry run says what each run would ask (the batch's preview), writes nothing and, with
``=count``, asks nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _answers import QUESTIONS, TICKETS, labelled

from jevper.evaluate.cli import main
from jevper.testing.faults import FaultServer, running

QUESTION_ROUTES = ("/v1/chat/completions", "/v1/responses", "/v1/systemone")


@pytest.fixture
def faults() -> Iterator[FaultServer]:
    with running() as server:
        yield server


def questions_sent(server: FaultServer) -> int:
    return sum(served.method == "POST" and served.path.endswith(QUESTION_ROUTES) for served in server.log)


def asking(faults: FaultServer) -> list[str]:
    return [str(TICKETS), "--questions", str(QUESTIONS), "--base-url", f"{faults.base_url()}={faults.model}"]


def test_an_evaluation_asked_again_with_the_cache_sends_no_question_and_gives_the_same_figures(
    tmp_path: Path, faults: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "answers.sqlite"
    first, again = tmp_path / "first", tmp_path / "again"
    assert main([*asking(faults), "--cache", str(cache), "--out", str(first)]) == 0
    sent = questions_sent(faults)
    assert sent >= len(labelled())
    capsys.readouterr()
    assert main([*asking(faults), "--cache", str(cache), "--out", str(again)]) == 0
    assert questions_sent(faults) == sent
    assert f"answers.parquet: {len(labelled())} rows answered from the cache" in capsys.readouterr().err
    figures = [json.loads((out / "metrics.json").read_text())["questions"] for out in (first, again)]
    assert figures[0] == figures[1]


def test_cache_mode_write_asks_every_row_again(tmp_path: Path, faults: FaultServer) -> None:
    cache = tmp_path / "answers.sqlite"
    assert main([*asking(faults), "--cache", str(cache), "--out", str(tmp_path / "a")]) == 0
    sent = questions_sent(faults)
    argv = [*asking(faults), "--cache", str(cache), "--cache-mode", "write", "--out", str(tmp_path / "b")]
    assert main(argv) == 0
    assert questions_sent(faults) == 2 * sent


def test_dry_run_count_asks_nothing_writes_nothing_and_prices_every_run(
    tmp_path: Path, faults: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = [*asking(faults), "--out", str(out), "--dry-run=count", "--rotations", "--content-free"]
    assert main(argv) == 0
    said = capsys.readouterr().out.splitlines()
    assert questions_sent(faults) == 0
    assert not out.exists()
    rows = len(labelled())
    heads = [line for line in said if ": dry run: " in line]
    # The rows, the team question's three rotations, the content-free states: one preview each.
    assert [line.split(": dry run: ")[0] for line in heads] == [
        "python -m jevper.evaluate: answers.parquet",
        "python -m jevper.evaluate: rotation 1",
        "python -m jevper.evaluate: rotation 2",
        "python -m jevper.evaluate: rotation 3",
        "python -m jevper.evaluate: content-free",
    ]
    assert heads[0].endswith(
        f"dry run: {rows} rows, {rows} distinct, 0 answered from the cache, {rows} to ask"
    )
    assert heads[-1].endswith("dry run: 2 rows, 2 distinct, 0 answered from the cache, 2 to ask")
    assert any("prompt tokens: an estimate" in line for line in said)
    assert any("time: not measured" in line for line in said)


def test_dry_run_counts_the_rows_the_cache_holds_as_hits(
    tmp_path: Path, faults: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "answers.sqlite"
    assert main([*asking(faults), "--cache", str(cache), "--out", str(tmp_path / "first")]) == 0
    sent = questions_sent(faults)
    capsys.readouterr()
    argv = [*asking(faults), "--cache", str(cache), "--out", str(tmp_path / "out"), "--dry-run=count"]
    assert main(argv) == 0
    rows = len(labelled())
    said = capsys.readouterr().out
    assert f"dry run: {rows} rows, {rows} distinct, {rows} answered from the cache, 0 to ask" in said
    assert "0 requests it would send" in said
    assert questions_sent(faults) == sent


def test_a_bare_dry_run_asks_only_its_sample(
    tmp_path: Path, faults: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*asking(faults), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert "the sample cost 16 rows" in said
    # Each of the sample's rows asks its three questions once: nothing else was asked.
    assert questions_sent(faults) == 16 * 3
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", [["--dry-run"], ["--cache", "answers.sqlite"]])
def test_the_dry_run_and_the_cache_without_a_server_are_refused(
    tmp_path: Path, flag: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(TICKETS), "--questions", str(QUESTIONS), "--answers", str(TICKETS), *flag]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "expected --base-url or --spawn to ask, got --answers" in capsys.readouterr().err
