"""`python -m jevper.evaluate` on the project's labelled tickets and batch outputs made without a server."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from _answers import QUESTIONS, TICKETS, answers, labelled, questions, write

from jevper.batch._schema import Row
from jevper.evaluate import Binding, Calibration, prompt_digest, rotated
from jevper.evaluate.cli import main

BINDING = [
    "--server", "llamacpp",
    "--release", "b11549",
    "--model", "qwen2.5-coder-1.5b",
    "--method", "logprobs",
    "--api", "chat_completions",
]  # fmt: skip


def answered(tmp_path: Path, suffix: str, rows: list[dict[str, str]] | None = None) -> Path:
    rows = rows if rows is not None else labelled()
    return write(tmp_path / f"answers{suffix}", [r["id"] for r in rows], answers(rows))


def run(labelled_path: Path, answers_path: Path, out: Path, *extra: str) -> int:
    return main([str(labelled_path), "--questions", str(QUESTIONS), "--answers", str(answers_path),
                 "--out", str(out), *extra])  # fmt: skip


def metrics(out: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((out / "metrics.json").read_text())
    return value


def test_fit_writes_every_figure_held_out_and_a_calibration_bound_to_the_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert run(TICKETS, answered(tmp_path, ".csv"), out, "--fit", *BINDING) == 0
    found = metrics(out)
    assert (found["kind"], found["version"], found["calibrated"]) == ("jevper.metrics", 2, True)
    # The figure binned is named for what it is, not for the APIs' rescaled confidence.
    assert "top_probability" in found["definitions"] and "confidence" not in found["definitions"]
    assert list(found["questions"]) == ["team", "angry", "urgency"]
    for qid, q in found["questions"].items():
        assert q["before"]["n"] == q["after"]["n"] == 240, qid
        assert set(q["before"]["ece"]) == {"equal_width", "equal_mass"}
        assert q["before"]["ece"]["equal_width"]["bins_count"] == 15
        filled = [b for b in q["before"]["ece"]["equal_width"]["bins"] if b["count"]]
        assert all(b["lower"] <= b["top_probability"] <= b["upper"] for b in filled), qid
        assert q["calibration"]["method"] in q["calibration"]["held_out_nll"]
        # The model is overconfident by construction: calibration lowers the held-out NLL and ECE.
        assert q["after"]["nll"] < q["before"]["nll"], qid
        assert q["after"]["ece"]["equal_width"]["value"] < q["before"]["ece"]["equal_width"]["value"], qid
    assert "expected_level_mae" in found["questions"]["urgency"]["before"]
    assert "expected_level_mae" not in found["questions"]["team"]["before"]
    calibration = Calibration.load(out / "calibration.json")
    assert calibration.bound_to == Binding(
        "llamacpp", "b11549", "qwen2.5-coder-1.5b", "logprobs", "chat_completions", prompt_digest(questions())
    )
    assert set(calibration.questions) == {"team", "angry", "urgency"}
    said = capsys.readouterr().out
    assert "team: n=240 accuracy" in said and "wrote metrics.json, report.html, calibration.json" in said


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_every_batch_format_gives_the_same_figures(tmp_path: Path, suffix: str) -> None:
    assert run(TICKETS, answered(tmp_path, ".csv"), tmp_path / "csv") == 0
    assert run(TICKETS, answered(tmp_path, suffix), tmp_path / "other") == 0
    assert metrics(tmp_path / "other")["questions"] == metrics(tmp_path / "csv")["questions"]
    assert not (tmp_path / "other" / "calibration.json").exists()


def test_a_labelled_table_in_json_lines_reads_like_its_csv(tmp_path: Path) -> None:
    lines = tmp_path / "tickets.jsonl"
    lines.write_text("".join(json.dumps(row) + "\n" for row in labelled()))
    answers_path = answered(tmp_path, ".jsonl")
    assert run(TICKETS, answers_path, tmp_path / "csv") == 0
    assert run(lines, answers_path, tmp_path / "jsonl") == 0
    assert metrics(tmp_path / "jsonl")["questions"] == metrics(tmp_path / "csv")["questions"]


def test_a_failed_row_is_counted_unanswered_and_an_empty_gold_cell_unlabelled(tmp_path: Path) -> None:
    rows = labelled()
    made = answers(rows)
    rows[0]["urgency"] = ""
    table = write_labelled(tmp_path / "tickets.csv", rows)
    made[1] = Row(error=("ProviderError", "the server refused"))
    answers_path = write(tmp_path / "answers.parquet", [r["id"] for r in rows], made)
    assert run(table, answers_path, tmp_path / "out") == 0
    found = metrics(tmp_path / "out")["questions"]
    assert (found["urgency"]["unlabelled"], found["urgency"]["unanswered"]) == (1, 1)
    assert found["urgency"]["before"]["n"] == 238
    assert (found["team"]["unlabelled"], found["team"]["unanswered"], found["team"]["before"]["n"]) == (
        0,
        1,
        239,
    )


def write_labelled(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_missing_gold_column_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{k: v for k, v in row.items() if k != "urgency"} for row in labelled()]
    table = write_labelled(tmp_path / "tickets.csv", rows)
    assert run(table, answered(tmp_path, ".csv"), tmp_path / "out") == 2
    said = capsys.readouterr().err
    assert "expected a gold column named after each question id" in said and "missing ['urgency']" in said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        (
            "team",
            "sales",
            "expected one of the options ['billing', 'technical', 'shipping', 'account'], got 'sales'",
        ),
        ("angry", "maybe", "expected true or false, got 'maybe'"),
        ("urgency", "7", "expected a level index 0 to 3 or a level's text, got '7'"),
    ],
)
def test_a_gold_value_that_is_no_option_is_refused_naming_the_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, value: str, expected: str
) -> None:
    rows = labelled()
    rows[5][column] = value
    table = write_labelled(tmp_path / "tickets.csv", rows)
    assert run(table, answered(tmp_path, ".csv"), tmp_path / "out") == 2
    said = capsys.readouterr().err
    assert f"row {rows[5]['id']!r}, column {column!r}: {expected}" in said


def test_ids_without_answers_are_refused_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = labelled()
    assert run(TICKETS, answered(tmp_path, ".csv", rows[3:]), tmp_path / "out") == 2
    said = capsys.readouterr().err
    assert "expected a row for every id" in said
    assert f"got none for 3 of its 240 ids, e.g. {[r['id'] for r in rows[:3]]}" in said


def test_answers_asked_with_other_questions_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = {"topic": {"type": "choice", "criteria": {"a": None, "b": None}}}
    rows = labelled()
    path = write(tmp_path / "answers.jsonl", [r["id"] for r in rows], [Row(answers={"topic": {
        "type": "choice", "choice": "a", "probabilities": {"a": 0.6, "b": 0.4}, "confidence": 0.2}})
        for _ in rows], other)  # fmt: skip
    assert run(TICKETS, path, tmp_path / "out") == 2
    said = capsys.readouterr().err
    assert "expected the batch's answer column for each question" in said
    assert "missing ['team', 'angry', 'urgency']" in said


def test_fit_without_saying_what_the_answers_came_from_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(TICKETS, answered(tmp_path, ".csv"), tmp_path / "out", "--fit", "--model", "m") == 2
    said = capsys.readouterr().err
    assert "--fit: expected what the answers came from" in said and "'--server'" in said
    assert "'--model'" not in said


def test_rotated_options_give_the_position_bias(tmp_path: Path) -> None:
    rows = labelled()
    ids = [r["id"] for r in rows]
    asked = questions()
    extra: list[str] = []
    for by in (1, 2, 3):
        turned = {**asked, "team": {**asked["team"], "criteria": rotated(asked["team"]["criteria"], by)}}
        qpath = tmp_path / f"rotated{by}.json"
        qpath.write_text(json.dumps(turned))
        # The synthetic model favours whichever option is shown first.
        extra += [
            "--rotated",
            str(qpath),
            str(write(tmp_path / f"rotated{by}.csv", ids, answers(rows, asked=turned), turned)),
        ]
    assert run(TICKETS, answered(tmp_path, ".csv"), tmp_path / "out", *extra) == 0
    bias = metrics(tmp_path / "out")["questions"]["team"]["position_bias"]
    assert (bias["rows"], bias["rotated_answers"]) == (240, 720)
    assert 0 < bias["changed"] <= bias["rows_changed"] <= 1
    assert bias["by_position"][0] > 0.3 and sum(bias["by_position"]) == pytest.approx(1)
    # Dividing each order's answers by its own mean takes out some of the pull to the first position (a
    # sharp model's mean under-states its pull: tests/evaluate/test_fit.py measures how much is left).
    corrected = bias["prior_corrected"]
    assert corrected["rows"] == 240
    assert corrected["changed"] < bias["changed"]
    assert corrected["by_position"][0] < bias["by_position"][0]
    assert metrics(tmp_path / "out")["questions"]["angry"]["position_bias"] is None
    assert "position bias over 240 rows asked again" in (tmp_path / "out" / "report.html").read_text()


def test_answers_that_all_failed_are_written_up_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = labelled()
    failed = [Row(error=("NoUpstreamError", "no server could be reached")) for _ in rows]
    path = write(tmp_path / "answers.parquet", [r["id"] for r in rows], failed)
    assert run(TICKETS, path, tmp_path / "out") == 1
    said = capsys.readouterr()
    assert "team: n=0 accuracy - ECE - (240 unanswered)" in said.out
    assert "expected answers to score, got none" in said.err
    assert metrics(tmp_path / "out")["questions"]["team"]["unanswered"] == 240


def test_answers_asked_in_several_orders_bind_their_calibration_to_that_many(tmp_path: Path) -> None:
    # The first 60 tickets: the binding does not depend on how many rows were fit, and their fit costs a
    # quarter of the 240's (the fit of all 240 is the first test of this module).
    rows = labelled()[:60]
    table = write_labelled(tmp_path / "tickets.csv", rows)
    out = tmp_path / "out"
    assert run(table, answered(tmp_path, ".csv", rows), out, "--fit", *BINDING, "--option-orders", "2") == 0
    assert Calibration.load(out / "calibration.json").bound_to.option_orders == 2
    assert metrics(out)["source"]["bound_to"]["option_orders"] == 2
    with pytest.raises(SystemExit):
        run(table, answered(tmp_path, ".csv", rows), out, "--option-orders", "0")


def test_an_earlier_evaluation_in_out_is_never_overwritten_without_replace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval"
    answers_path = answered(tmp_path, ".csv")
    assert run(TICKETS, answers_path, out) == 0
    first = (out / "metrics.json").read_bytes()
    (out / "metrics.json").write_text('{"kept": true}\n')  # the earlier run's file, as it stands
    capsys.readouterr()
    assert run(TICKETS, answers_path, out) == 2
    said = capsys.readouterr().err
    assert f"--out {out}" in said and "metrics.json, report.html" in said and "--replace" in said
    assert (out / "metrics.json").read_text() == '{"kept": true}\n'
    assert run(TICKETS, answers_path, out, "--replace") == 0
    assert (out / "metrics.json").read_bytes() == first
