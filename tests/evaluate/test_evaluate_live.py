"""Live (marker `live`): the labelled tickets and the content-free states asked of the embedded llama.cpp
through the batch core, scored, calibrated, and the calibration refused for another model."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest
from _answers import QUESTIONS, labelled

from jevper.evaluate import Calibration, CalibrationMismatchError
from jevper.evaluate.cli import main
from jevper.servers import SpawnedServer

pytestmark = pytest.mark.live

ROWS = 12  # three folds need six rows a question; every row is three answers from a slow server


def test_evaluate_asks_the_server_fits_a_bound_calibration_and_refuses_it_for_another_model(
    llamacpp: SpawnedServer, tmp_path: Path
) -> None:
    rows = labelled()[:ROWS]
    table = tmp_path / "tickets.csv"
    with table.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = tmp_path / "out"
    argv = [
        str(table),
        "--questions",
        str(QUESTIONS),
        "--base-url",
        llamacpp.base_url,
        "--model",
        llamacpp.model,
    ]
    bound = ["--server", "llamacpp", "--release", "b11549", "--method", "grammar",
             "--api", "chat_completions"]  # fmt: skip
    assert main([*argv, "--out", str(out), "--fit", "--folds", "3", "--content-free", *bound]) == 0
    figures = json.loads((out / "metrics.json").read_text())["questions"]
    for qid, q in figures.items():
        # A grammar holds the small model to a label: every row is answered, the content-free ones too.
        assert (q["before"]["n"], q["unanswered"]) == (ROWS, 0), qid
        assert sum(q["content_free_prior"]) == pytest.approx(1.0), qid
        assert q["after"]["n"] == q["before"]["n"], qid
    calibration = Calibration.load(out / "calibration.json")
    assert calibration.bound_to.model == llamacpp.model
    team = calibration.apply("team", {"billing": 0.4, "technical": 0.3, "shipping": 0.2, "account": 0.1},
                             calibration.bound_to)  # fmt: skip
    assert sum(team.values()) == pytest.approx(1.0)
    other = dataclasses.replace(calibration.bound_to, model="another-model")
    with pytest.raises(CalibrationMismatchError) as refused:
        calibration.apply("team", team, other)
    assert refused.value.field == "model"
