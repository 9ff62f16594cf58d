"""A calibration is bound to what it was fit for: applied to anything else it is refused, by name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

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
    assert (written["kind"], written["version"]) == ("jevper.calibration", 4)
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
    path.write_text(json.dumps({**CALIBRATION.to_json(), "version": 5}))
    with pytest.raises(
        ConfigError, match=r"expected a calibration .*'version': one of \[1, 2, 3, 4\].*got .*'version': 5"
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


def _written_with(tmp_path: Path, change: Any) -> Path:
    """CALIBRATION's file with ``change`` made to its JSON."""
    value = CALIBRATION.to_json()
    change(value)
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(value))
    return path


def _set(where: str, field: str, given: Any) -> Any:
    def change(value: dict[str, Any]) -> None:
        value["questions"][where][field] = given

    return change


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (_set("team", "method", "isotonic"), "questions.team.method"),
        (_set("team", "temperature", 0), "questions.team.temperature"),
        (_set("team", "temperature", -1.8), "questions.team.temperature"),
        (_set("team", "temperature", float("nan")), "questions.team.temperature"),
        (_set("team", "temperature", "1.8"), "questions.team.temperature"),
        (_set("team", "prior", [0.6, 0.4]), "questions.team.prior"),
        (_set("team", "prior", [0.6, -0.3, 0.1]), "questions.team.prior"),
        (_set("team", "prior", None), "questions.team.prior"),
        (_set("team", "rows", -50), "questions.team.rows"),
        (_set("team", "rows", 2.5), "questions.team.rows"),
        (_set("team", "top", {"a": float("nan"), "b": 0.0}), "questions.team.top"),
        (_set("team", "top", {"a": 1.0}), "questions.team.top"),
        (_set("team", "options", ["billing", "billing", "shipping"]), "questions.team.options"),
        (_set("team", "type", "ranking"), "questions.team.type"),
        (_set("team", "held_out_nll", {"identity": float("inf")}), "questions.team.held_out_nll"),
        (_set("angry", "platt", {"a": float("inf"), "b": 0.0}), "questions.angry.platt"),
        (_set("angry", "platt", None), "questions.angry.platt"),
        (_set("angry", "options", ["true", "false", "maybe"]), "questions.angry.options"),
        (_set("angry", "method", "beta"), "questions.angry.beta"),
        (lambda v: v.update(folds=1), "folds"),
        (lambda v: v.update(seed="0"), "seed"),
        (lambda v: v["bound_to"].update(option_orders=0), "bound_to.option_orders"),
        (lambda v: v["bound_to"].update(model=7), "bound_to.model"),
        (lambda v: v["bound_to"].pop("surface"), "bound_to.surface"),
    ],
)
def test_a_calibration_file_that_cannot_apply_is_refused_when_loaded_naming_the_field(
    tmp_path: Path, change: Any, named: str
) -> None:
    path = _written_with(tmp_path, change)
    with pytest.raises(ConfigError, match=rf"^calibration {path}: {named}: expected ") as refused:
        Calibration.load(path)
    assert type(refused.value) is ConfigError


def test_a_map_made_in_python_is_checked_as_a_file_is() -> None:
    with pytest.raises(ConfigError, match=r"^temperature: expected a positive finite number, got 0"):
        Calibrator("temperature", 0.0)
    with pytest.raises(ConfigError, match=r"^method: expected one of \['identity', "):
        Calibrator("isotonic")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^prior: expected 3 probabilities, one per option"):
        QuestionCalibration("choice", ("a", "b", "c"), Calibrator("prior", prior=(0.5, 0.5)), {})


def test_the_batch_and_the_gateway_refuse_a_bad_calibration_file_at_start_up_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jevper.batch.cli import main as batch
    from jevper.serve.cli import main as serve

    path = _written_with(tmp_path, _set("team", "temperature", 0))
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))
    rows = tmp_path / "in.jsonl"
    rows.write_text(json.dumps({"id": 1, "state": "the parcel never came"}) + "\n")
    # Port 9 (discard) on loopback: nothing is asked before the file is refused.
    given = ["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--calibration", str(path)]
    assert batch([str(rows), str(tmp_path / "out.jsonl"), "--questions", str(questions), *given]) == 2
    assert "questions.team.temperature: expected a positive finite number, got 0" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()
    served = ["--upstream", "http://127.0.0.1:9/v1", "--model", "m", "--calibration", str(path)]
    assert serve(served) == 2
    assert "questions.team.temperature: expected a positive finite number, got 0" in capsys.readouterr().err
