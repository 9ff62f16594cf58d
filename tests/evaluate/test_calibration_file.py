"""A calibration is bound to what it was fit for: applied to anything else it is refused, by name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from jevper import ConfigError
from jevper.evaluate import (
    Binding,
    Calibration,
    CalibrationMismatchError,
    Calibrator,
    QuestionCalibration,
    prompt_digest,
)

QUESTIONS = {
    "team": {"type": "choice", "criteria": {"billing": "money", "technical": "bugs", "shipping": None}},
    "angry": {"type": "noul", "instructions": "Is the writer angry?"},
}
BOUND = Binding(
    server_kind="llamacpp",
    server_release="b11549",
    model="qwen2.5-coder-1.5b",
    method="logprobs",
    surface="chat_completions",
    prompt_digest=prompt_digest(QUESTIONS),
)
CALIBRATION = Calibration(
    BOUND,
    {
        "team": QuestionCalibration(
            "choice",
            ("billing", "technical", "shipping"),
            Calibrator("prior_temperature", 1.8, (0.6, 0.3, 0.1)),
            {"identity": 1.2, "prior_temperature": 0.9},
        ),
        "angry": QuestionCalibration("noul", ("true", "false"), Calibrator("platt", platt=(0.7, -0.4)), {}),
    },
    folds=5,
    seed=0,
)


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(Binding)])
def test_applying_a_calibration_to_other_answers_is_refused_naming_the_field_that_differs(field: str) -> None:
    other = dataclasses.replace(BOUND, **{field: "something else"})
    with pytest.raises(CalibrationMismatchError) as refused:
        CALIBRATION.apply("team", {"billing": 0.5, "technical": 0.3, "shipping": 0.2}, other)
    assert refused.value.field == field
    assert refused.value.expected == getattr(BOUND, field)
    assert refused.value.got == "something else"
    assert f"{field} {getattr(BOUND, field)!r}, got 'something else'" in str(refused.value)
    assert isinstance(refused.value, ConfigError)


def test_a_calibrated_answer_sums_to_one_in_the_questions_option_order() -> None:
    out = CALIBRATION.apply("team", {"shipping": 0.2, "billing": 0.5, "technical": 0.3}, BOUND)
    assert list(out) == ["billing", "technical", "shipping"]
    assert sum(out.values()) == pytest.approx(1.0)
    # The prior leaned to billing: dividing it out moves mass to the others.
    assert out["billing"] < 0.5
    yes = CALIBRATION.apply("angry", {"true": 0.9, "false": 0.1}, BOUND)
    assert sum(yes.values()) == pytest.approx(1.0) and yes["true"] < 0.9


def test_an_unknown_question_or_other_options_are_refused_by_name() -> None:
    with pytest.raises(CalibrationMismatchError, match=r"got 'urgency'") as unknown:
        CALIBRATION.apply("urgency", {"0": 1.0}, BOUND)
    assert unknown.value.field == "question"
    with pytest.raises(CalibrationMismatchError, match=r"expected probabilities for the options") as options:
        CALIBRATION.apply("team", {"billing": 0.5, "account": 0.5}, BOUND)
    assert options.value.field == "options"


def test_the_calibration_file_round_trips_and_says_its_version(tmp_path: Path) -> None:
    topped = dataclasses.replace(CALIBRATION.questions["team"].calibrator, top=(1.7, 0.4), rows=90)
    calibration = dataclasses.replace(
        CALIBRATION,
        questions={
            **CALIBRATION.questions,
            "team": dataclasses.replace(CALIBRATION.questions["team"], calibrator=topped),
        },
    )
    path = tmp_path / "calibration.json"
    calibration.save(path)
    written = json.loads(path.read_text())
    assert (written["kind"], written["version"]) == ("jevper.calibration", 3)
    assert written["bound_to"]["model"] == "qwen2.5-coder-1.5b"
    assert written["bound_to"]["option_orders"] == 1
    assert written["questions"]["team"]["top"] == {"a": 1.7, "b": 0.4}
    assert "top" not in written["questions"]["angry"]
    assert Calibration.load(path) == calibration


def test_a_version_1_file_is_read_as_one_without_top_label_maps(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({**CALIBRATION.to_json(), "version": 1}))
    assert Calibration.load(path) == dataclasses.replace(CALIBRATION, source=str(path))


def test_a_calibration_file_of_another_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({**CALIBRATION.to_json(), "version": 4}))
    with pytest.raises(
        ConfigError, match=r"expected a calibration .*'version': one of \[1, 2, 3\].*got .*'version': 4"
    ):
        Calibration.load(path)


def test_the_prompt_digest_follows_the_option_order_and_wording_but_not_the_field_order() -> None:
    turned = {
        **QUESTIONS,
        "team": {"type": "choice", "criteria": {"technical": "bugs", "billing": "money", "shipping": None}},
    }
    reworded = {**QUESTIONS, "angry": {"type": "noul", "instructions": "Is the writer cross?"}}
    reordered = {qid: dict(reversed(list(q.items()))) for qid, q in QUESTIONS.items()}
    assert prompt_digest(turned) != BOUND.prompt_digest
    assert prompt_digest(reworded) != BOUND.prompt_digest
    assert prompt_digest(reordered) == BOUND.prompt_digest
