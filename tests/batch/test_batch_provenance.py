"""The batch records what answered its rows with its output (Parquet metadata; a file beside a CSV or
JSON Lines output), and a calibration applied with method and api left to "auto" asks as it was fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _batch_data import QUESTIONS

from jevper import __version__
from jevper.batch._provenance import read_provenance, sidecar
from jevper.batch.cli import main
from jevper.calibration import Binding, Calibration, Calibrator, QuestionCalibration, prompt_digest
from jevper.testing.faults import FaultServer


def rows(tmp_path: Path, n: int = 6) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text(
        "".join(json.dumps({"id": i, "state": f"ticket {i}: charged twice"}) + "\n" for i in range(n))
    )
    return path


def questions(tmp_path: Path) -> Path:
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(QUESTIONS))
    return path


@pytest.mark.parametrize("name", ["out.parquet", "out.csv", "out.jsonl"])
def test_an_output_records_the_model_the_method_and_surface_that_answered_and_the_prompt(
    faults: FaultServer, tmp_path: Path, name: str
) -> None:
    output = tmp_path / name
    status = main(
        [
            str(rows(tmp_path)),
            str(output),
            "--questions",
            str(questions(tmp_path)),
            "--base-url",
            faults.base_url(),
            "--model",
            "fault-model",
            "--no-progress",
        ]
    )
    assert status == 0
    recorded = read_provenance(output)
    assert recorded is not None
    # api and method "auto": the fault server's model is asked on Responses and read by grammar.
    assert recorded["asked"] == {"method": "auto", "api": "auto"}
    assert (recorded["answered"]["method"], recorded["answered"]["surface"]) == ("grammar", "responses")
    assert recorded["answered"]["questions"]["topic"] == {"methods": ["grammar"], "surfaces": ["responses"]}
    assert recorded["model"] == "fault-model" and recorded["models"] == ["fault-model"]
    assert recorded["prompt_digest"] == prompt_digest(QUESTIONS)
    assert recorded["option_orders"] == 1 and recorded["calibration"] is None
    assert recorded["jevper"] == __version__
    # A server given by URL states neither its kind nor its release.
    assert recorded["server_kind"] is None and recorded["server_release"] is None
    assert sidecar(output).exists() == (output.suffix != ".parquet")


def calibration_for(surface: str, method: str) -> Calibration:
    binding = Binding("llamacpp", "b11549", "fault-model", method, surface, prompt_digest(QUESTIONS))
    noul = QuestionCalibration("noul", ("true", "false"), Calibrator("platt", platt=(0.7, -0.4)), {})
    return Calibration(binding, {"urgent": noul}, folds=5, seed=0)


def test_a_calibration_applied_with_method_and_api_auto_asks_as_it_was_fit_so_every_row_applies(
    faults: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "calibration.json"
    calibration_for("chat_completions", "grammar").save(path)
    output = tmp_path / "out.parquet"
    status = main(
        [
            str(rows(tmp_path)),
            str(output),
            "--questions",
            str(questions(tmp_path)),
            "--base-url",
            faults.base_url(),
            "--model",
            "fault-model",
            "--calibration",
            str(path),
            "--no-progress",
        ]
    )
    said = capsys.readouterr()
    assert status == 0, said
    assert "6 answered, 0 errors" in said.out
    assert "asked with --method grammar --api chat_completions, as it was fit" in said.err
    recorded = read_provenance(output)
    assert recorded is not None
    assert (recorded["answered"]["method"], recorded["answered"]["surface"]) == (
        "grammar",
        "chat_completions",
    )
    assert recorded["calibration"] == Calibration.load(path).digest()


def test_a_calibration_for_another_method_than_asked_is_refused_before_any_row(
    faults: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "calibration.json"
    calibration_for("chat_completions", "logprobs").save(path)
    before = len(faults.log)
    status = main(
        [
            str(rows(tmp_path)),
            str(tmp_path / "out.parquet"),
            "--questions",
            str(questions(tmp_path)),
            "--base-url",
            faults.base_url(),
            "--model",
            "fault-model",
            "--calibration",
            str(path),
            "--method",
            "grammar",
            "--no-progress",
        ]
    )
    said = capsys.readouterr()
    assert status == 2, said
    assert "method 'logprobs', got 'grammar'" in said.err
    assert len(faults.log) == before
