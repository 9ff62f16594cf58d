"""calibration.json's guaranteed thresholds (version 4): written by ``--fit --target-accuracy A --risk D``,
read back checked, older files still read, and ``threshold_for`` the one answer to "below what?"."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from _answers import QUESTIONS, TICKETS, answers, labelled, write

from jevper import ConfigError
from jevper.calibration import Calibration, QuestionCalibration, Threshold, threshold_for
from jevper.evaluate import Binding, Calibrator, prompt_digest
from jevper.evaluate.cli import main

BOUND = Binding("llamacpp", "b11549", "m", "logprobs", "chat_completions", prompt_digest({}))
THRESHOLD = Threshold(0.9, 0.1, 240, 0.83, {"billing": 0.8, "technical": None})
CALIBRATION = Calibration(
    BOUND,
    {
        "team": QuestionCalibration(
            "choice", ("billing", "technical", "shipping"), Calibrator(), {}, threshold=THRESHOLD
        ),
        "angry": QuestionCalibration("noul", ("true", "false"), Calibrator(), {}),
    },
    folds=5,
    seed=0,
)
BINDING = ["--server", "llamacpp", "--release", "b11549", "--model", "m", "--method", "logprobs",
           "--api", "chat_completions"]  # fmt: skip


def test_thresholds_round_trip_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    CALIBRATION.save(path)
    written = json.loads(path.read_text())
    assert written["version"] == 4
    assert written["questions"]["team"]["threshold"] == {
        "target_accuracy": 0.9,
        "risk": 0.1,
        "rows": 240,
        "top_probability": 0.83,
        "per_label": {"billing": 0.8, "technical": None},
    }
    assert "threshold" not in written["questions"]["angry"]
    assert Calibration.load(path) == CALIBRATION


def test_a_version_3_file_is_read_as_one_without_thresholds(tmp_path: Path) -> None:
    value = CALIBRATION.to_json()
    del value["questions"]["team"]["threshold"]
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({**value, "version": 3}))
    loaded = Calibration.load(path)
    assert loaded.questions["team"].threshold is None
    with pytest.raises(ConfigError, match=r"expected a guaranteed threshold for question 'team', got none"):
        threshold_for(loaded, "team")


def test_threshold_for_gives_the_labels_own_else_the_questions_and_none_where_none_met_the_target() -> None:
    assert threshold_for(CALIBRATION, "team", "billing") == 0.8
    assert threshold_for(CALIBRATION, "team", "technical") is None  # every such answer is below it
    assert threshold_for(CALIBRATION, "team", "shipping") == 0.83  # no threshold of its own
    assert threshold_for(CALIBRATION, "team") == 0.83
    with pytest.raises(ConfigError, match=r"question 'angry', got none; fit with .* --risk D"):
        threshold_for(CALIBRATION, "angry", "true")
    with pytest.raises(ConfigError, match=r"question 'urgency', got no map for it"):
        threshold_for(CALIBRATION, "urgency")


def _with_threshold(tmp_path: Path, **change: Any) -> Path:
    value = CALIBRATION.to_json()
    value["questions"]["team"]["threshold"].update(change)
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(value))
    return path


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"target_accuracy": 1.5}, "target_accuracy"),
        ({"target_accuracy": "0.9"}, "target_accuracy"),
        ({"risk": 0}, "risk"),
        ({"risk": 1.0}, "risk"),
        ({"rows": -1}, "rows"),
        ({"rows": True}, "rows"),
        ({"top_probability": 1.2}, "top_probability"),
        ({"top_probability": float("nan")}, "top_probability"),
        ({"per_label": {"billing": -0.1}}, "per_label.billing"),
        ({"per_label": {"account": 0.8}}, "per_label"),
        ({"per_label": [0.8]}, "per_label"),
        ({"kept": 3}, "kept"),
    ],
)
def test_a_threshold_that_cannot_apply_is_refused_when_loaded_naming_the_field(
    tmp_path: Path, change: dict[str, Any], named: str
) -> None:
    path = _with_threshold(tmp_path, **change)
    with pytest.raises(
        ConfigError, match=rf"^calibration {path}: questions.team.threshold.{named}: expected "
    ):
        Calibration.load(path)


def test_a_threshold_missing_its_value_is_refused_not_read_as_none(tmp_path: Path) -> None:
    value = CALIBRATION.to_json()
    del value["questions"]["team"]["threshold"]["top_probability"]
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(value))
    with pytest.raises(ConfigError, match=r"questions.team.threshold.top_probability: expected it \(null"):
        Calibration.load(path)


def test_fit_with_a_risk_writes_each_questions_thresholds_to_calibration_json_metrics_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = labelled()
    given = write(tmp_path / "answers.csv", [r["id"] for r in rows], answers(rows))
    out = tmp_path / "out"
    argv = [str(TICKETS), "--questions", str(QUESTIONS), "--answers", str(given), "--out", str(out), "--fit",
            *BINDING, "--target-accuracy", "0.8", "--risk", "0.1", "--per-label"]  # fmt: skip
    assert main(argv) == 0
    said = capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text())
    calibration = Calibration.load(out / "calibration.json")
    for qid, q in metrics["questions"].items():
        g = q["guarantee"]
        assert (g["target_accuracy"], g["risk"], g["rows"]) == (0.8, 0.1, 240), qid
        assert g["on"].startswith("the calibrated top probability, held out"), qid
        written = calibration.questions[qid].threshold
        assert written is not None
        assert written.top_probability == g["threshold"]
        assert written.per_label == {label: c["threshold"] for label, c in g["per_label"].items()}
        assert set(g["per_label"]) == set(q["options"])
        if g["threshold"] is not None:
            # The rows kept are shown right at least the target, and the bound says so too.
            assert g["accuracy"] >= g["lower_bound"] >= 0.8, qid
    # The synthetic answers reach 0.8 on some questions, not at every label: both kinds are said.
    thresholds = [q["guarantee"]["threshold"] for q in metrics["questions"].values()]
    labels = [
        c["threshold"] for q in metrics["questions"].values() for c in q["guarantee"]["per_label"].values()
    ]
    assert any(t is not None for t in thresholds)
    assert None in labels
    assert "threshold 0." in said and "per label" in said
    page = (out / "report.html").read_text()
    assert "guaranteed threshold: " in page and "none: all to review" in page


def test_a_risk_without_fit_thresholds_the_answers_own_figure_and_writes_no_calibration(
    tmp_path: Path,
) -> None:
    rows = labelled()
    given = write(tmp_path / "answers.csv", [r["id"] for r in rows], answers(rows))
    out = tmp_path / "out"
    argv = [str(TICKETS), "--questions", str(QUESTIONS), "--answers", str(given), "--out", str(out),
            "--target-accuracy", "0.999", "--risk", "0.05"]  # fmt: skip
    assert main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    for q in metrics["questions"].values():
        # 240 rows cannot show 0.999: no threshold, rather than one invented.
        assert q["guarantee"]["threshold"] is None and q["guarantee"]["kept"] == 0
        assert q["guarantee"]["on"] == "the top probability as answered"
        assert "per_label" not in q["guarantee"]
    assert not (out / "calibration.json").exists()
    assert "no threshold meets the target, every answer goes to review" in (out / "report.html").read_text()


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--risk", "1"], "--risk: expected a probability in (0, 1), got 1.0"),
        (["--per-label"], "--per-label: expected --risk"),
    ],
)
def test_a_risk_out_of_range_or_per_label_without_a_risk_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    argv = [str(TICKETS), "--questions", str(QUESTIONS), "--answers", str(tmp_path / "none.csv"),
            "--out", str(tmp_path / "out"), *extra]  # fmt: skip
    assert main(argv) == 2
    assert said in capsys.readouterr().err


def test_a_threshold_made_in_python_is_checked_as_a_file_is() -> None:
    with pytest.raises(ConfigError, match=r"^risk: expected a probability in \(0, 1\), got 0"):
        Threshold(0.9, 0, 10, 0.5)
    with pytest.raises(ConfigError, match=r"^threshold.per_label: expected labels among the options"):
        QuestionCalibration(
            "noul", ("true", "false"), Calibrator(), {}, threshold=Threshold(0.9, 0.1, 10, 0.5, {"yes": 0.6})
        )
    assert dataclasses.replace(THRESHOLD, per_label=None).below("billing") == 0.83
