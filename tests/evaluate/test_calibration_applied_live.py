"""Live (marker `live`): a calibration fit on labelled tickets asked of the embedded llama.cpp, then applied
by the client, the batch and the gateway over that same server: the same calibrated answers from all
three; a calibration for another model refused by each.

Tolerance: each calibrated probability agrees to within 0.01 across the three (the same request to the
same one-slot server gives the same logprobs; the slack is for llama.cpp's float noise between calls).
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _answers import QUESTIONS, labelled, questions
from openai import OpenAI
from starlette.testclient import TestClient

from jevper import CalibrationMismatchError, SystemOneClient
from jevper.batch.cli import main as batch
from jevper.calibration import Calibration
from jevper.evaluate.cli import main as evaluate
from jevper.serve import GatewayConfig, create_app
from jevper.serve.app import CALIBRATED_HEADER
from jevper.serve.config import ConfigError
from jevper.servers import SpawnedServer

pytestmark = pytest.mark.live

FIT_ROWS = 12  # three folds need six rows a question
ASKED_ROWS = 3
TOLERANCE = 0.01
HOW = {"api": "chat_completions", "method": "grammar"}


def table(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def probabilities(answer: dict[str, Any]) -> dict[str, float]:
    """A System One answer's distribution, however the output holds it (a noul as yes/no)."""
    if "noul" in answer:
        return {"yes": answer["noul"], "no": 1 - answer["noul"]}
    given = answer["probabilities"]
    return {str(k): v for k, v in (given.items() if isinstance(given, dict) else given)}


def test_the_client_the_batch_and_the_gateway_give_the_same_calibrated_answers_and_refuse_another_model(
    llamacpp: SpawnedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = labelled()
    fitted = table(tmp_path / "tickets.csv", rows[:FIT_ROWS])
    out = tmp_path / "fit"
    bound = ["--server", llamacpp.server, "--release", llamacpp.version,
             "--method", HOW["method"], "--api", HOW["api"], "--model", llamacpp.model]  # fmt: skip
    argv = [str(fitted), "--questions", str(QUESTIONS), "--base-url", llamacpp.base_url, "--out", str(out)]
    assert evaluate([*argv, "--fit", "--folds", "3", *bound]) == 0
    path = out / "calibration.json"
    calibration = Calibration.load(path)
    methods = {qid: q.calibrator.method for qid, q in calibration.questions.items()}
    asked = rows[:ASKED_ROWS]

    # The client.
    sdk = OpenAI(base_url=llamacpp.base_url, api_key="none")
    client = SystemOneClient(sdk, model=llamacpp.model, **HOW, calibration=path)
    by_client = {}
    for row in asked:
        answered = client.system_one(state=row["state"], questions=questions())
        assert answered.debug["calibration"]["file"] == str(path)
        assert answered.debug["calibration"]["calibrated"] == methods
        by_client[row["id"]] = answered.to_api()["answers"]

    # The batch, with its own --calibration.
    states = table(tmp_path / "asked.csv", asked)
    output = tmp_path / "asked.out.parquet"
    flags = ["--questions", str(QUESTIONS), "--base-url", llamacpp.base_url, "--model", llamacpp.model,
             "--api", HOW["api"], "--method", HOW["method"], "--concurrency", "1"]  # fmt: skip
    assert batch([str(states), str(output), *flags, "--calibration", str(path)]) == 0
    by_batch = {str(r["id"]): r for r in pq.read_table(output).to_pylist()}

    # The gateway, in front of the same server.
    config = GatewayConfig(
        upstream=llamacpp.base_url, model=llamacpp.model, pool=1, calibration=calibration, **HOW
    )
    by_gateway = {}
    with TestClient(create_app(config)) as gateway:
        for row in asked:
            body = {"model": llamacpp.model, "state": row["state"], "questions": questions()}
            reply = gateway.post("/v1/systemone", json=body)
            assert reply.status_code == 200, reply.text
            assert reply.headers[CALIBRATED_HEADER] == ", ".join(f"{q}={m}" for q, m in methods.items())
            by_gateway[row["id"]] = reply.json()["answers"]

    for row in asked:
        for qid in questions():
            one = probabilities(by_client[row["id"]][qid])
            assert sum(one.values()) == pytest.approx(1.0), (row["id"], qid)
            for other in (by_batch[row["id"]][qid], by_gateway[row["id"]][qid]):
                assert probabilities(other) == pytest.approx(one, abs=TOLERANCE), (row["id"], qid)

    # A calibration for another model: refused by each, before any question is asked.
    elsewhere = tmp_path / "another-model.json"
    dataclasses.replace(
        calibration, bound_to=dataclasses.replace(calibration.bound_to, model="another")
    ).save(elsewhere)
    with pytest.raises(CalibrationMismatchError) as refused:
        SystemOneClient(sdk, model=llamacpp.model, **HOW, calibration=elsewhere)
    assert (refused.value.field, refused.value.got) == ("model", llamacpp.model)
    capsys.readouterr()
    again = tmp_path / "again.out.parquet"
    assert batch([str(states), str(again), *flags, "--calibration", str(elsewhere)]) == 2
    assert f"model 'another', got {llamacpp.model!r}" in capsys.readouterr().err
    assert not again.exists()
    with pytest.raises(ConfigError, match=f"model 'another', got {llamacpp.model!r}"):
        create_app(dataclasses.replace(config, calibration=Calibration.load(elsewhere)))
    json.loads(path.read_text())  # the file fit is left as it was written
