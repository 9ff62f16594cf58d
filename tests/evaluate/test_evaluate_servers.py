"""`python -m jevper.evaluate --server URL`: the labelled rows asked through the batch core (of the fault
server, which answers at once), their answers kept beside the figures."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _answers import QUESTIONS, TICKETS, labelled

from jevper.evaluate import _ask
from jevper.evaluate.cli import main
from jevper.testing.faults import FaultServer, running


@pytest.fixture(scope="module")
def faults() -> Iterator[FaultServer]:
    with running() as server:
        yield server


def asking(faults: FaultServer) -> list[str]:
    """The labelled tickets and their questions, asked of the fault server."""
    asked = [str(TICKETS), "--questions", str(QUESTIONS)]
    return [*asked, "--base-url", faults.base_url(), "--model", faults.model]


def test_asking_a_server_keeps_its_answers_and_gives_the_figures_they_give_again(
    tmp_path: Path, faults: FaultServer
) -> None:
    out = tmp_path / "asked"
    common = [str(TICKETS), "--questions", str(QUESTIONS)]
    assert main([*common, "--base-url", faults.base_url(), "--model", faults.model, "--out", str(out)]) == 0
    assert (out / "answers.parquet").is_file() and not list(out.glob("*.partial"))
    asked = json.loads((out / "metrics.json").read_text())
    for q in asked["questions"].values():
        assert q["before"]["n"] + q["unanswered"] == len(labelled())
    again = tmp_path / "again"
    assert main([*common, "--answers", str(out / "answers.parquet"), "--out", str(again)]) == 0
    assert json.loads((again / "metrics.json").read_text())["questions"] == asked["questions"]


def test_labels_that_cannot_be_scored_are_refused_before_any_request(
    tmp_path: Path, faults: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = labelled()
    table = tmp_path / "tickets.jsonl"
    table.write_text("".join(json.dumps({**row, "team": "sales"}) + "\n" for row in rows))
    before = len(faults.log)
    argv = [str(table), "--questions", str(QUESTIONS), "--base-url", f"{faults.base_url()}={faults.model}"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "column 'team': expected one of the options" in capsys.readouterr().err
    assert len(faults.log) == before


def test_rotations_ask_each_choice_again_under_every_rotation_and_give_its_position_bias(
    tmp_path: Path, faults: FaultServer
) -> None:
    out = tmp_path / "out"
    argv = asking(faults)
    assert main([*argv, "--out", str(out), "--rotations"]) == 0
    turned = json.loads((out / "questions.rotated-1.json").read_text())
    assert list(turned) == ["team"]
    assert list(turned["team"]["criteria"]) == ["technical", "shipping", "account", "billing"]
    assert sorted(p.name for p in out.glob("answers.rotated-*.parquet")) == [
        f"answers.rotated-{by}.parquet" for by in (1, 2, 3)
    ]
    figures = json.loads((out / "metrics.json").read_text())["questions"]
    bias = figures["team"]["position_bias"]
    assert (bias["rows"], bias["rotated_answers"], len(bias["by_position"])) == (240, 720, 4)
    assert figures["urgency"]["position_bias"] is None


def test_rotations_without_a_server_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(TICKETS), "--questions", str(QUESTIONS), "--answers", str(TICKETS), "--rotations"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "--rotations: expected --base-url" in capsys.readouterr().err


def test_content_free_asks_the_content_free_states_and_tries_their_prior(
    tmp_path: Path, faults: FaultServer
) -> None:
    # The first 60 tickets: the content-free states and their prior do not depend on how many rows were
    # asked, and 60 are asked and fit in a quarter of the 240's time.
    tickets = tmp_path / "tickets.csv"
    tickets.write_text("".join(TICKETS.read_text(encoding="utf-8").splitlines(keepends=True)[:61]))
    out = tmp_path / "out"
    argv = [str(tickets), *asking(faults)[1:]]
    bound = ["--server", "fault", "--release", "0", "--method", "auto", "--api", "auto"]
    assert main([*argv, "--out", str(out), "--content-free", "--fit", *bound]) == 0
    states = [json.loads(line)["state"] for line in (out / "content-free.jsonl").read_text().splitlines()]
    assert states == ["N/A", "[MASK]"] and (out / "content-free.answers.parquet").is_file()
    for qid, q in json.loads((out / "metrics.json").read_text())["questions"].items():
        assert sum(q["content_free_prior"]) == pytest.approx(1.0), qid
        assert {"content_free", "content_free_temperature"} <= set(q["calibration"]["held_out_nll"]), qid


def test_rotations_of_choices_of_different_widths_give_each_its_own_position_bias(
    tmp_path: Path, faults: FaultServer
) -> None:
    # team has four options, so three rotations; channel two, so one: the rotations past its width leave
    # it out, and its position bias is over the orders it was asked in.
    questions = json.loads(QUESTIONS.read_text())
    questions["channel"] = {"type": "choice", "criteria": {"email": None, "phone": None}}
    asked = tmp_path / "questions.json"
    asked.write_text(json.dumps(questions))
    table = tmp_path / "tickets.jsonl"
    rows = labelled()
    table.write_text(
        "".join(json.dumps({**r, "channel": ("email", "phone")[i % 2]}) + "\n" for i, r in enumerate(rows))
    )
    out = tmp_path / "out"
    argv = [str(table), "--questions", str(asked), "--base-url", faults.base_url(), "--model", faults.model]
    assert main([*argv, "--out", str(out), "--rotations"]) == 0
    assert list(json.loads((out / "questions.rotated-1.json").read_text())) == ["team", "channel"]
    assert list(json.loads((out / "questions.rotated-2.json").read_text())) == ["team"]
    figures = json.loads((out / "metrics.json").read_text())["questions"]
    team, channel = figures["team"]["position_bias"], figures["channel"]["position_bias"]
    assert (team["rows"], team["rotated_answers"], len(team["by_position"])) == (240, 720, 4)
    assert (channel["rows"], channel["rotated_answers"], len(channel["by_position"])) == (240, 240, 2)


def test_rotations_with_no_choice_to_rotate_are_refused_before_any_request(
    tmp_path: Path, faults: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = {k: v for k, v in json.loads(QUESTIONS.read_text()).items() if v["type"] != "choice"}
    asked = tmp_path / "questions.json"
    asked.write_text(json.dumps(questions))
    before = len(faults.log)
    argv = [str(TICKETS), "--questions", str(asked), "--base-url", faults.base_url(), "--model", faults.model]
    assert main([*argv, "--out", str(tmp_path / "out"), "--rotations"]) == 2
    assert "--rotations: expected a choice question to rotate, got none among ['angry', 'urgency']" in (
        capsys.readouterr().err
    )
    assert len(faults.log) == before


def test_asking_says_its_progress_on_stderr_rows_done_of_all_and_the_rate(
    tmp_path: Path, faults: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main([*asking(faults), "--out", str(out), "--rotations"]) == 0
    said = capsys.readouterr()
    # Each file of answers asked has its line: the rows done of all, the rate, the errors, each server.
    for name in ("answers.parquet", "answers.rotated-1.parquet", "answers.rotated-3.parquet"):
        line = next(line for line in said.err.splitlines() if f"asking {name}: " in line)
        assert "240/240 rows 100% | " in line and " rows/s | 0 errors | #1 " in line, line
    assert "rows/s" not in said.out  # the figures stay on stdout alone


def test_the_progress_is_said_while_no_row_has_finished_yet(
    tmp_path: Path, faults: FaultServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slow server: nothing finishes for a second or more, and the wait is still said, not kept silent.
    monkeypatch.setattr(_ask, "LINE_S", 0.1)
    table = tmp_path / "tickets.jsonl"
    table.write_text("".join(json.dumps(row) + "\n" for row in labelled()[:2]))
    argv = [
        str(table),
        "--questions",
        str(QUESTIONS),
        "--base-url",
        faults.base_url(),
        "--model",
        faults.model,
    ]
    faults.delay = 0.5
    try:
        assert main([*argv, "--out", str(tmp_path / "out"), "--concurrency", "2"]) == 0
    finally:
        faults.delay = 0.0
    said = capsys.readouterr().err
    assert "asking answers.parquet: 0/2 rows 0% | 0.0 rows/s | 0 errors | #1 " in said, said
    assert "asking answers.parquet: 2/2 rows 100% | " in said
