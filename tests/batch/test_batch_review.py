"""``--review-below P``: the rows whose confidence (the lowest top probability over their questions) is
below P, written beside the output in its format; failed rows stay out; a resumed run gets its review
too. ``--review-below auto``: below the calibration's guaranteed threshold per question and label."""

from __future__ import annotations

import csv
import json
import socket
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _batch_data import QUESTIONS, posts

from jevper import ConfigError
from jevper.batch._core import as_questions
from jevper.batch._files import Writer, format_of
from jevper.batch._review import review_path, row_top_probability, write_review
from jevper.batch._schema import Row, result_columns, result_fields
from jevper.batch.cli import main
from jevper.calibration import Binding, Calibration, Calibrator, QuestionCalibration, Threshold, prompt_digest
from jevper.testing.faults import FaultServer

ASKED = as_questions(QUESTIONS)
QIDS = [qid for qid, _ in ASKED]


def answers(topic: float, urgent: float, anger: list[float]) -> dict[str, Any]:
    return {
        "topic": {"type": "choice", "choice": "billing" if topic >= 0.5 else "other",
                  "probabilities": {"billing": topic, "other": 1 - topic}, "confidence": 0.0},
        "urgent": {"type": "noul", "noul": urgent},
        "anger": {"type": "score", "score": 1.0, "legend": {"0": "calm", "1": "annoyed", "2": "furious"},
                  "probabilities": {str(i): p for i, p in enumerate(anger)}, "confidence": 0.0},
    }  # fmt: skip


#: id -> the row's outcome; its confidence: 0.8 (anger's top), 0.55 (topic's), 0.6 (urgent's "no"), none
ROWS = {
    "sure": Row(answers(0.9, 0.95, [0.1, 0.8, 0.1])),
    "torn": Row(answers(0.55, 0.9, [0.9, 0.05, 0.05])),
    "no": Row(answers(0.99, 0.4, [0.05, 0.05, 0.9])),
    "failed": Row(error=("ProviderError", "503")),
}


def output(path: Path) -> Path:
    schema = pa.schema([pa.field("id", pa.string()), *result_fields(ASKED)])
    batch = pa.RecordBatch.from_arrays(
        [pa.array(list(ROWS)), *result_columns(ASKED, list(ROWS.values()))], schema=schema
    )
    writer = Writer(path, schema, format_of(path, "OUTPUT"))
    writer.write(batch)
    writer.close()
    return path


def ids(path: Path) -> list[str]:
    if path.suffix == ".parquet":
        return [str(i) for i in pq.read_table(path).column("id").to_pylist()]
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            return [row["id"] for row in csv.DictReader(f)]
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def header(path: Path) -> list[str]:
    if path.suffix == ".parquet":
        return pq.read_schema(path).names
    if path.suffix == ".csv":
        return path.read_text().splitlines()[0].replace('"', "").split(",")
    return list(json.loads(path.read_text().splitlines()[0]))


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_the_rows_below_the_threshold_go_to_stem_review_ext_in_the_outputs_format(
    tmp_path: Path, suffix: str
) -> None:
    made = output(tmp_path / f"out{suffix}")
    path, count = write_review(made, QIDS, 0.7)
    assert path == tmp_path / f"out.review{suffix}"
    assert (ids(path), count) == (["torn", "no"], 2)
    assert header(path) == header(made)
    assert ids(write_review(made, QIDS, 0.5)[0]) == []
    assert ids(write_review(made, QIDS, 1.0)[0]) == ["sure", "torn", "no"]  # never the failed row


def test_a_rows_confidence_is_its_least_sure_answers_top_probability_in_every_format() -> None:
    struct = {"topic": {"probabilities": [("billing", 0.3), ("other", 0.7)]}, "urgent": {"noul": 0.2}}
    assert row_top_probability(struct, ["topic", "urgent"]) == pytest.approx(0.7)
    flat = {"topic.probabilities": '{"billing": 0.3, "other": 0.7}', "urgent.noul": "0.9", "anger.noul": ""}
    assert row_top_probability(flat, ["topic", "urgent"]) == pytest.approx(0.7)
    assert row_top_probability({"topic": None, "urgent": None}, ["topic", "urgent"]) is None
    assert row_top_probability({"topic.probabilities": "", "urgent.noul": ""}, ["topic", "urgent"]) is None


def test_an_output_edited_into_an_impossible_answer_is_refused_naming_its_row(tmp_path: Path) -> None:
    made = output(tmp_path / "out.jsonl")
    lines = made.read_text().splitlines()
    edited = json.loads(lines[2])
    edited["urgent"]["noul"] = 1.4
    made.write_text("\n".join([*lines[:2], json.dumps(edited), *lines[3:]]) + "\n")
    with pytest.raises(ConfigError, match=r"--review-below: OUTPUT .*out.jsonl, row 3: expected the yes/no"):
        write_review(made, QIDS, 0.7)
    assert not review_path(made).exists()


def run(tmp_path: Path, server: str, *more: str) -> int:
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))
    rows = tmp_path / "in.jsonl"
    if not rows.exists():
        states = [f"ticket {i}" if i != 2 else "bad \ud800" for i in range(6)]
        rows.write_text("".join(json.dumps({"id": i, "state": s}) + "\n" for i, s in enumerate(states)))
    argv = [str(rows), str(tmp_path / "out.csv"), "--questions", str(questions), "--base-url", server,
            "--model", "fault-model", "--api", "systemone", *more]  # fmt: skip
    return main(argv)


def test_the_command_line_writes_the_review_and_says_how_many_rows(
    faults: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The fault server's System One answers: topic 0.5/0.5, so every answered row is at 0.5.
    assert run(tmp_path, faults.base_url(), "--review-below", "0.6") == 1  # row 2 fails
    said = capsys.readouterr().out
    assert f"5 rows with a confidence below 0.6 written to {tmp_path / 'out.review.csv'}" in said
    assert ids(tmp_path / "out.review.csv") == ["0", "1", "3", "4", "5"]


def test_a_resumed_run_writes_its_review_and_so_does_a_resume_of_a_finished_one(
    faults: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    assert run(tmp_path, gone, "--review-below", "0.6", "--patience", "0", "--cool-down", "0.01") == 3
    assert not review_path(tmp_path / "out.csv").exists()
    assert run(tmp_path, faults.base_url(), "--review-below", "0.6", "--resume") == 1
    assert ids(tmp_path / "out.review.csv") == ["0", "1", "3", "4", "5"]
    review_path(tmp_path / "out.csv").unlink()
    assert run(tmp_path, faults.base_url(), "--review-below", "0.4", "--resume") == 0
    assert "nothing to resume" in capsys.readouterr().out
    assert ids(tmp_path / "out.review.csv") == []


def test_a_threshold_out_of_range_or_a_review_file_left_behind_is_refused_before_any_request(
    faults: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(tmp_path, faults.base_url(), "--review-below", "1.5") == 2
    assert "--review-below: expected a probability in (0, 1], got 1.5" in capsys.readouterr().err
    (tmp_path / "out.review.csv").write_text("id\n")
    assert run(tmp_path, faults.base_url(), "--review-below", "0.5") == 2
    assert "expected no file at" in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists()


def test_an_answer_that_is_no_distribution_is_refused_as_in_the_evaluation_not_taken_as_sure() -> None:
    # Read as before by its own reader, 1.7 of "1.0 in all" was a top probability of 1.7: never reviewed.
    impossible = {"topic": {"probabilities": [("billing", 1.7), ("other", -0.7)]}}
    with pytest.raises(
        ValueError, match=r"expected each option's probability in \[0, 1\], got 'billing': 1.7"
    ):
        row_top_probability(impossible, ["topic"])
    with pytest.raises(ValueError, match=r"probability of true in \[0, 1\], got nan"):
        row_top_probability({"urgent.noul": "nan"}, ["urgent"])


def calibration(urgent: Threshold | None, **more: Threshold) -> Calibration:
    """Identity maps with these thresholds, bound as the fault server's answers are."""
    bound = Binding("faults", "test", "fault-model", "native", "systemone", prompt_digest(QUESTIONS))
    options = {"topic": ("billing", "other"), "urgent": ("true", "false"), "anger": ("0", "1", "2")}
    given = {"urgent": urgent, **more}
    return Calibration(
        bound,
        {
            qid: QuestionCalibration(q["type"], options[qid], Calibrator(), {}, threshold=given.get(qid))
            for qid, q in QUESTIONS.items()
        },
        folds=5,
        seed=0,
    ).with_layouts(QUESTIONS)


def threshold(top: float | None, **per_label: float | None) -> Threshold:
    return Threshold(0.9, 0.1, 200, top, per_label or None)


def test_auto_holds_each_answer_to_its_questions_threshold_or_its_top_options_where_there_is_one(
    tmp_path: Path,
) -> None:
    made = output(tmp_path / "out.jsonl")
    calm = {"topic": threshold(0.5), "anger": threshold(0.5)}
    # One threshold for urgent: "no" (its answer false at 0.6) is below 0.7, "sure" (true at 0.95) is not.
    assert ids(write_review(made, QIDS, calibration(threshold(0.7), **calm))[0]) == ["no"]
    # Per label, the same answers: true needs 0.92 (so "torn", true at 0.9, goes), false 0.5 (so "no" stays).
    per_label = calibration(threshold(0.7, true=0.92, false=0.5), **calm)
    assert ids(write_review(made, QIDS, per_label)[0]) == ["torn"]
    # A label no threshold met the target for sends every answer of it to review: "no" is furious ("2").
    furious = calibration(
        threshold(0.7, true=0.92, false=0.5), topic=threshold(0.5), anger=threshold(0.5, **{"2": None})
    )
    assert ids(write_review(made, QIDS, furious)[0]) == ["torn", "no"]
    # And a question with none at all sends every answered row; never the failed one.
    assert ids(write_review(made, QIDS, calibration(threshold(None), **calm))[0]) == ["sure", "torn", "no"]


def test_the_command_line_reviews_below_the_calibrations_thresholds_with_auto(
    faults: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The fault server's topic answer is 0.5/0.5, its top option billing (the first of equal ones).
    path = tmp_path / "calibration.json"
    zero = {"urgent": threshold(0.0), "anger": threshold(0.0)}
    calibration(**zero, topic=threshold(0.4, billing=None)).save(path)
    assert run(tmp_path, faults.base_url(), "--calibration", str(path), "--review-below", "auto") == 1
    said = capsys.readouterr().out
    assert (
        f"5 rows below the guaranteed thresholds of {path} written to {tmp_path / 'out.review.csv'}" in said
    )
    assert ids(tmp_path / "out.review.csv") == ["0", "1", "3", "4", "5"]
    # The same answers held to billing's 0.4: none is below it.
    calibration(**zero, topic=threshold(0.9, billing=0.4)).save(path)
    review_path(tmp_path / "out.csv").unlink()
    assert (
        run(tmp_path, faults.base_url(), "--calibration", str(path), "--review-below", "auto", "--resume")
        == 0
    )
    assert "0 rows below the guaranteed thresholds" in capsys.readouterr().out
    assert ids(tmp_path / "out.review.csv") == []


def test_auto_without_a_calibration_or_without_its_thresholds_is_refused_before_any_request(
    faults: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = posts(faults)
    assert run(tmp_path, faults.base_url(), "--review-below", "auto") == 2
    assert "--review-below auto: expected --calibration FILE" in capsys.readouterr().err
    path = tmp_path / "calibration.json"
    calibration(threshold(0.7)).save(path)
    assert run(tmp_path, faults.base_url(), "--calibration", str(path), "--review-below", "auto") == 2
    assert "got none for ['topic', 'anger']" in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists() and posts(faults) == asked
    with pytest.raises(SystemExit):
        run(tmp_path, faults.base_url(), "--review-below", "often")
    assert "expected a probability in (0, 1] or auto, got 'often'" in capsys.readouterr().err
