"""``--calibration FILE`` on the gateway, offline in front of the fault server: the answers are the
calibrated client's and a header names each calibrated question's method; a question asked with
another layout is the request's 422; a calibration for another model is refused before anything starts."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI
from starlette.testclient import TestClient

from jevper import AsyncSystemOneClient
from jevper.calibration import Binding, Calibration, Calibrator, QuestionCalibration, prompt_digest
from jevper.serve import GatewayConfig, create_app
from jevper.serve.app import CALIBRATED_HEADER
from jevper.serve.config import ConfigError
from jevper.testing.faults import FaultServer

QUESTIONS: dict[str, Any] = {
    "topic": {"type": "choice", "criteria": {"billing": None, "shipping": "parcels", "technical": "bugs"}},
    "refund": {"type": "noul", "instructions": "Money back?"},
}
BOUND = Binding("llamacpp", "b11549", "smollm2", "grammar", "chat_completions", prompt_digest(QUESTIONS))
CALIBRATION = Calibration(
    BOUND,
    {
        "topic": QuestionCalibration(
            "choice", ("billing", "shipping", "technical"), Calibrator("temperature", 3.0), {}
        )
    },
    folds=5,
    seed=0,
).with_layouts(QUESTIONS)
BODY = {"model": "smollm2", "state": "I was charged twice.", "questions": QUESTIONS}


def gateway(upstream: FaultServer, calibration: Calibration) -> TestClient:
    config = GatewayConfig(
        upstream=upstream.base_url(), model="smollm2", api="chat_completions", calibration=calibration
    )
    return TestClient(create_app(config), raise_server_exceptions=True)


def test_the_gateway_answers_as_the_calibrated_client_and_names_the_calibration_in_a_header(
    upstream: FaultServer,
) -> None:
    with gateway(upstream, CALIBRATION) as app:
        reply = app.post("/v1/systemone", json=BODY)
    assert reply.status_code == 200, reply.text
    assert reply.headers[CALIBRATED_HEADER] == "topic=temperature"

    async def direct() -> dict[str, Any]:
        sdk = AsyncOpenAI(base_url=upstream.base_url(), api_key="none")
        client = AsyncSystemOneClient(sdk, model="smollm2", api="chat_completions", calibration=CALIBRATION)
        answered = await client.system_one(state=BODY["state"], questions=QUESTIONS)
        return answered.to_api()["answers"]

    expected = asyncio.run(direct())
    topic = reply.json()["answers"]["topic"]
    assert topic["probabilities"] == pytest.approx(expected["topic"]["probabilities"])
    assert sum(topic["probabilities"].values()) == pytest.approx(1.0)
    assert max(topic["probabilities"].values()) < 0.6  # T = 3 flattens the fault server's 0.82
    assert reply.json()["answers"]["refund"] == expected["refund"]


def test_a_request_asking_a_calibrated_question_with_other_options_is_a_422_naming_the_layout(
    upstream: FaultServer,
) -> None:
    other = {**QUESTIONS, "topic": {"type": "choice", "criteria": {"shipping": None, "billing": None}}}
    with gateway(upstream, CALIBRATION) as app:
        reply = app.post("/v1/systemone", json={**BODY, "questions": other})
        plain = app.post("/v1/systemone", json={**BODY, "questions": {"refund": QUESTIONS["refund"]}})
    assert reply.status_code == 422, reply.text
    assert "calibration of 'topic': expected the question as it was fit" in reply.text
    assert plain.status_code == 200 and CALIBRATED_HEADER not in plain.headers


def test_decisions_are_calibrated_by_question_name_and_a_named_question_asked_otherwise_is_a_400(
    upstream: FaultServer,
) -> None:
    choices = [{"value": "billing"}, {"value": "shipping", "description": "parcels"}]
    choices.append({"value": "technical", "description": "bugs"})
    fit = {"topic": {**QUESTIONS["topic"], "instructions": "Which team?"}}
    calibration = dataclasses.replace(CALIBRATION, bound_to=dataclasses.replace(BOUND, prompt_digest=None))
    calibration = calibration.with_layouts(fit)
    topic = {"type": "choice", "name": "topic", "instructions": "Which team?", "choices": choices}
    body = {"model": "smollm2", "input": "I was charged twice.", "questions": [topic]}
    with gateway(upstream, calibration) as app:
        reply = app.post("/v1/decisions", json=body)
        plain = app.post("/v1/decisions", json={**body, "questions": [{**topic, "name": None}]})
        other = app.post("/v1/decisions", json={**body, "questions": [{**topic, "instructions": "Who?"}]})
    assert reply.status_code == plain.status_code == 200, (reply.text, plain.text)
    assert reply.headers[CALIBRATED_HEADER] == "topic=temperature"
    assert CALIBRATED_HEADER not in plain.headers
    calibrated, raw = (
        max(p["probability"] for p in r.json()["answers"][0]["probabilities"]) for r in (reply, plain)
    )
    assert calibrated < 0.6 < raw  # T = 3 flattens the fault server's 0.82
    assert other.status_code == 400, other.text
    assert other.json()["error"]["param"] == "questions"
    assert "calibration of 'topic': expected the question as it was fit" in other.json()["error"]["message"]


def test_a_calibration_for_another_model_is_refused_before_anything_starts(
    upstream: FaultServer, tmp_path: Path
) -> None:
    other = dataclasses.replace(CALIBRATION, bound_to=dataclasses.replace(BOUND, model="qwen"))
    with pytest.raises(
        ConfigError, match=r"^--calibration \(calibration\): expected answers .* model 'qwen'"
    ):
        create_app(
            GatewayConfig(
                upstream=upstream.base_url(), model="smollm2", api="chat_completions", calibration=other
            )
        )
    from jevper.serve.cli import parser, planned

    path = tmp_path / "calibration.json"
    other.save(path)
    for behind in (["--spawn"], ["--upstream", "http://127.0.0.1:9/v1", "--model", "smollm2"]):
        with pytest.raises(ConfigError, match=r"model 'qwen', got 'smollm2'"):
            planned(parser().parse_args([*behind, "--calibration", str(path)]))
    CALIBRATION.save(path)
    config = planned(
        parser().parse_args(["--spawn", "--api", "chat_completions", "--calibration", str(path)])
    )
    assert config.calibration == CALIBRATION and config.calibration.source == str(path)


#: Question ids outside Latin-1, and one holding what separates the header's items.
ODD_IDS = ("紧急", "a=b, c")
#: The header for them: each id percent-encoded (UTF-8), as a client reads it back with urllib's unquote.
ODD_HEADER = "%E7%B4%A7%E6%80%A5=temperature, a%3Db%2C%20c=temperature"


def calibrated_as(questions: dict[str, Any], digest: str | None) -> Calibration:
    topic = CALIBRATION.questions["topic"]
    calibration = dataclasses.replace(
        CALIBRATION,
        questions={qid: topic for qid in questions},
        bound_to=dataclasses.replace(BOUND, prompt_digest=digest),
    )
    return calibration.with_layouts(questions)


def read_back(header: str) -> list[tuple[str, str]]:
    from urllib.parse import unquote

    return [(unquote(qid), method) for qid, method in (item.split("=") for item in header.split(", "))]


def test_a_calibrated_question_whose_id_is_not_latin_1_is_answered_its_id_percent_encoded_in_the_header(
    upstream: FaultServer,
) -> None:
    questions = {qid: QUESTIONS["topic"] for qid in ODD_IDS}
    with gateway(upstream, calibrated_as(questions, prompt_digest(questions))) as app:
        reply = app.post("/v1/systemone", json={**BODY, "questions": questions})
    assert reply.status_code == 200, reply.text
    assert reply.headers[CALIBRATED_HEADER] == ODD_HEADER
    assert read_back(ODD_HEADER) == [(qid, "temperature") for qid in ODD_IDS]


def test_a_calibrated_decisions_question_named_in_cjk_is_answered_with_the_header(
    upstream: FaultServer,
) -> None:
    fit = {qid: {**QUESTIONS["topic"], "instructions": "Which team?"} for qid in ODD_IDS}
    choices = [{"value": "billing"}, {"value": "shipping", "description": "parcels"}]
    choices.append({"value": "technical", "description": "bugs"})
    asked = [
        {"type": "choice", "name": qid, "instructions": "Which team?", "choices": choices} for qid in ODD_IDS
    ]
    with gateway(upstream, calibrated_as(fit, None)) as app:
        reply = app.post(
            "/v1/decisions", json={"model": "m", "input": "I was charged twice.", "questions": asked}
        )
    assert reply.status_code == 200, reply.text
    assert reply.headers[CALIBRATED_HEADER] == ODD_HEADER
