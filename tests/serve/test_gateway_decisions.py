"""The gateway's POST /v1/decisions offline: the official `openai` SDK's `decisions.create` against the
Starlette app, in front of the fault server (healthy, scripted or faulty upstream).

The route keeps System One's rules (the key, the requests in flight, the body's size and time) and
answers every refusal in OpenAI's error envelope, a bad request as a 400 naming the param.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types import Decision
from starlette.testclient import TestClient

from jevper import AsyncSystemOneClient
from jevper.serve import GatewayConfig, create_app
from jevper.testing.bodies import chat_label
from jevper.testing.faults import FaultServer, running
from jevper.testing.script import Script

KEY = "sk-gateway-decisions-7c2e"
AUTH = {"authorization": f"Bearer {KEY}"}
INPUT = "I was charged twice for the same subscription this month."
PREDICATE = {"type": "predicate", "name": "refund", "instructions": "Does the customer want money back?"}
STRINGS = {
    "type": "choice",
    "name": "team",
    "instructions": "Which team should answer?",
    "choices": [
        {"value": "billing", "description": "charges"},
        {"value": "shipping"},
        {"value": "technical"},
    ],
}
BOOLEANS = {"type": "choice", "instructions": "Is it urgent?", "choices": [{"value": True}, {"value": False}]}
SCORE = {
    "type": "score",
    "name": "urgency",
    "instructions": "How urgent is it?",
    "levels": [{"label": "low"}, {"label": "medium", "description": "this week"}, {"label": "high"}],
}
QUESTIONS = [PREDICATE, STRINGS, BOOLEANS, SCORE]
VALID: dict[str, Any] = {"model": "smollm2", "input": INPUT, "questions": QUESTIONS}
ENVELOPE = {"message", "type", "param", "code"}


def gateway(upstream_url: str, **settings: Any) -> TestClient:
    config = GatewayConfig(
        upstream=upstream_url, model="smollm2", api="chat_completions", api_keys=(KEY,), **settings
    )
    return TestClient(create_app(config), raise_server_exceptions=True)


@pytest.fixture
def app(upstream: FaultServer) -> Iterator[TestClient]:
    with gateway(upstream.base_url()) as client:
        yield client


def sdk(app: TestClient, key: str = KEY) -> openai.OpenAI:
    """The official SDK, its HTTP client the app's own (an httpx client), retries off."""
    return openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=app, max_retries=0)


def error_of(reply: Any) -> dict[str, Any]:
    body = reply.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == ENVELOPE, body
    error: dict[str, Any] = body["error"]
    return error


def test_the_official_sdk_gets_every_question_type_answered_in_order_with_names_kept(app: TestClient) -> None:
    decision = sdk(app).decisions.create(model="smollm2", input=INPUT, questions=QUESTIONS)
    assert [a.type for a in decision.answers] == ["predicate", "choice", "choice", "score"]
    assert [a.name for a in decision.answers] == ["refund", "team", None, "urgency"]
    predicate, team, urgent, urgency = decision.answers
    assert predicate.type == "predicate" and 0.0 <= predicate.probability <= 1.0
    assert team.type == "choice" and [p.value for p in team.probabilities] == [
        "billing",
        "shipping",
        "technical",
    ]
    assert urgent.type == "choice" and [p.value for p in urgent.probabilities] == [True, False]
    assert urgent.choice is True or urgent.choice is False
    assert urgency.type == "score" and [p.label for p in urgency.probabilities] == ["low", "medium", "high"]
    for answer in (team, urgent, urgency):
        assert sum(p.probability for p in answer.probabilities) == pytest.approx(1.0)
    assert urgency.score == pytest.approx(sum(p.value * p.probability for p in urgency.probabilities))
    assert decision.model == "smollm2"
    assert decision.usage.input_tokens > 0 and decision.usage.output_tokens > 0
    assert decision.usage.total_tokens == decision.usage.input_tokens + decision.usage.output_tokens


def test_the_body_validates_as_the_sdks_decision_and_says_the_upstreams_model(app: TestClient) -> None:
    reply = app.post("/v1/decisions", json={**VALID, "model": "any-name"}, headers=AUTH)
    assert reply.status_code == 200, reply.text
    decision = Decision.model_validate(reply.json())
    assert decision.model == "smollm2"  # as on /v1/systemone, the upstream's model answers
    assert set(reply.json()["usage"]) == {
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
        "output_tokens_details",
        "total_tokens",
    }


def test_four_hundred_questions_are_answered_in_one_request(app: TestClient) -> None:
    questions = [
        {"type": "predicate", "name": f"q{i}", "instructions": f"Is it case {i}?"} for i in range(400)
    ]
    reply = app.post("/v1/decisions", json={**VALID, "questions": questions}, headers=AUTH)
    assert reply.status_code == 200, reply.text[:300]
    answers = Decision.model_validate(reply.json()).answers
    assert [a.name for a in answers] == [f"q{i}" for i in range(400)]
    assert {a.type for a in answers} == {"predicate"}


@pytest.mark.parametrize(
    ("change", "param", "code"),
    [
        (
            {"questions": [{**STRINGS, "choices": [{"value": "billing"}]}]},
            "questions[0].choices",
            "array_below_min_length",
        ),
        (
            {"questions": [{**STRINGS, "choices": [{"value": "billing"}, {"value": "billing"}]}]},
            "questions[0].choices[1].value",
            "invalid_value",
        ),
        ({"questions": []}, "questions", "empty_array"),
        ({"questions": [{**PREDICATE, "type": "rank"}]}, "questions[0].type", "invalid_value"),
        ({"questions": [PREDICATE] * 401}, "questions", "array_above_max_length"),
        ({"model": None}, "model", "missing_required_parameter"),
        ({"temperature": 0}, "temperature", "unknown_parameter"),
        ({"prompt_cache_key": "k" * 257}, "prompt_cache_key", "string_above_max_length"),
    ],
)
def test_a_bad_request_is_a_400_in_openais_envelope_naming_the_param(
    app: TestClient, change: dict[str, Any], param: str, code: str
) -> None:
    body = {key: value for key, value in {**VALID, **change}.items() if value is not None}
    reply = app.post("/v1/decisions", json=body, headers=AUTH)
    assert reply.status_code == 400, reply.text
    error = error_of(reply)
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    assert error["message"].startswith(f"{param}: expected")


def test_the_sdk_raises_bad_request_error_with_the_message(app: TestClient) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk(app).decisions.create(model="smollm2", input=INPUT, questions=[])
    assert refused.value.status_code == 400
    assert "expected 1 to 400 questions, got none" in refused.value.message
    assert refused.value.param == "questions" and refused.value.code == "empty_array"


def test_a_body_that_is_not_json_is_a_400_in_openais_envelope(app: TestClient) -> None:
    reply = app.post("/v1/decisions", content=b'{"input": "x", "questions": ', headers=AUTH)
    assert reply.status_code == 400
    assert "got a body that is not JSON" in error_of(reply)["message"]


def test_a_body_nested_too_deep_is_a_400_in_openais_envelope(app: TestClient) -> None:
    deep = "[" * 100 + "]" * 100
    reply = app.post("/v1/decisions", content=f'{{"input": {deep}}}'.encode(), headers=AUTH)
    assert reply.status_code == 400
    assert "nested at most" in error_of(reply)["message"]


@pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer wrong"}, {"x-api-key": KEY[:-1]}])
def test_a_missing_or_wrong_key_is_a_401_in_openais_envelope(
    app: TestClient, headers: dict[str, str]
) -> None:
    reply = app.post("/v1/decisions", json=VALID, headers=headers)
    assert reply.status_code == 401
    assert "Authorization: Bearer" in error_of(reply)["message"]
    assert KEY not in reply.text


def test_the_sdk_raises_authentication_error_for_a_wrong_key(app: TestClient) -> None:
    with pytest.raises(openai.AuthenticationError):
        sdk(app, key="sk-wrong").decisions.create(model="smollm2", input=INPUT, questions=[PREDICATE])


def test_a_body_over_the_size_cap_is_a_413_in_openais_envelope(upstream: FaultServer) -> None:
    with gateway(upstream.base_url(), max_body_bytes=1000) as client:
        reply = client.post("/v1/decisions", json={**VALID, "input": "x" * 2000}, headers=AUTH)
    assert reply.status_code == 413
    assert error_of(reply)["code"] == "request_too_large"


def test_a_request_past_the_in_flight_limit_is_a_429_in_openais_envelope(app: TestClient) -> None:
    gateway_ = app.app.state.gateway
    gateway_.in_flight = gateway_.config.max_in_flight
    try:
        reply = app.post("/v1/decisions", json=VALID, headers=AUTH)
    finally:
        gateway_.in_flight = 0
    assert reply.status_code == 429 and reply.headers["retry-after"] == "1"
    assert error_of(reply)["code"] == "rate_limit_error"


def test_an_upstream_that_fails_is_a_502_in_openais_envelope(upstream: FaultServer) -> None:
    with gateway(upstream.base_url("html-500")) as client:
        reply = client.post("/v1/decisions", json={**VALID, "questions": [PREDICATE]}, headers=AUTH)
    assert reply.status_code == 502, reply.text
    error = error_of(reply)
    assert (error["type"], error["code"]) == ("server_error", "upstream_error")


def test_a_question_whose_answer_cannot_be_read_is_a_refusal_among_the_answers() -> None:
    prose = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": None, "refusal": "I cannot help with that."},
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 6},
    }
    script = Script()
    with running(script=script, model="smollm2") as scripted:
        for reply in (chat_label(), prose, chat_label()):
            script.reply("/chat/completions", 200, reply)
        with gateway(scripted.base_url(), method="logprobs", pool=1) as client:
            questions = [PREDICATE, {**PREDICATE, "name": "angry"}, {**PREDICATE, "name": "again"}]
            reply = client.post("/v1/decisions", json={**VALID, "questions": questions}, headers=AUTH)
    assert reply.status_code == 200, reply.text
    answers = Decision.model_validate(reply.json()).answers
    assert [(a.type, a.name) for a in answers] == [
        ("predicate", "refund"),
        ("refusal", "angry"),
        ("predicate", "again"),
    ]


def prose() -> dict[str, Any]:
    """A Chat Completions answer in words, not a label: the readout asks again (its corrective retry)."""
    body = chat_label()
    top = [{"token": t, "logprob": lp} for t, lp in (("Well", -0.2), ("The", -1.9))]
    body["choices"][0]["message"]["content"] = "Well, the customer"
    body["choices"][0]["logprobs"] = {"content": [{"token": "Well", "logprob": -0.2, "top_logprobs": top}]}
    body["usage"] = {"prompt_tokens": 600, "completion_tokens": 5}
    return body


def test_an_upstream_that_fails_the_corrective_retry_is_a_502_and_counted_as_its_failure() -> None:
    script = Script()
    script.reply("/chat/completions", 200, prose())
    script.reply("/chat/completions", 503, "<html><h1>503 Service Unavailable</h1></html>", "text/html")
    with (
        running(script=script, model="smollm2") as scripted,
        gateway(scripted.base_url(), method="logprobs", recheck_s=60) as client,
    ):
        reply = client.post("/v1/decisions", json={**VALID, "questions": [PREDICATE]}, headers=AUTH)
        details = client.get("/health", headers=AUTH).json()["upstream_details"]
    assert reply.status_code == 502, reply.text
    error = error_of(reply)
    assert (error["type"], error["code"]) == ("server_error", "upstream_error")
    assert "503" in error["message"]
    assert [upstream["in"] for upstream in details] == [False]


def test_the_usage_counts_the_requests_of_a_refused_question() -> None:
    script = Script()
    with running(script=script, model="smollm2") as scripted:
        for reply in (chat_label(), prose(), prose()):
            script.reply("/chat/completions", 200, reply)
        with gateway(scripted.base_url(), method="logprobs", pool=1) as client:
            questions = [PREDICATE, {**PREDICATE, "name": "angry"}]
            reply = client.post("/v1/decisions", json={**VALID, "questions": questions}, headers=AUTH)
    assert reply.status_code == 200, reply.text
    decision = Decision.model_validate(reply.json())
    assert [a.type for a in decision.answers] == ["predicate", "refusal"]
    label_usage = chat_label()["usage"]
    assert decision.usage.input_tokens == label_usage["prompt_tokens"] + 2 * 600
    assert decision.usage.output_tokens == label_usage["completion_tokens"] + 2 * 5


def test_the_metrics_count_a_decisions_answer_by_type(app: TestClient) -> None:
    assert app.post("/v1/decisions", json=VALID, headers=AUTH).status_code == 200
    metrics = app.get("/metrics").text
    assert (
        'jevper_serve_questions_total{method="grammar",surface="chat_completions",type="predicate"} 1.0'
        in metrics
    )
    assert 'jevper_serve_requests_total{route="/v1/decisions",status="200"}' in metrics


def test_an_unknown_path_names_the_decisions_route(app: TestClient) -> None:
    reply = app.post("/v1/decision", content=json.dumps(VALID), headers=AUTH)
    assert reply.status_code == 404 and "POST /v1/decisions" in reply.text


class _Broken:
    """An upstream SDK whose every call fails in a way nobody anticipated."""

    def __init__(self) -> None:
        async def create(**_: Any) -> Any:
            raise ZeroDivisionError("an error nobody anticipated")

        self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=create))


def test_an_unexpected_error_is_a_500_in_openais_envelope_naming_the_request_id(
    upstream: FaultServer,
) -> None:
    config = GatewayConfig(upstream=upstream.base_url(), model="smollm2", api="chat_completions")
    client = AsyncSystemOneClient(_Broken(), model="smollm2", api="chat_completions")
    with TestClient(create_app(config, client), raise_server_exceptions=True) as app:
        reply = app.post("/v1/decisions", json=VALID)
        assert app.get("/health").json()["in_flight"] == 0
    assert reply.status_code == 500
    error = error_of(reply)
    assert (error["type"], error["code"]) == ("server_error", "internal_error")
    assert f"request {reply.headers['x-request-id']}" in error["message"]


def test_a_wrong_method_on_the_decisions_route_is_a_405_in_openais_envelope(app: TestClient) -> None:
    reply = app.get("/v1/decisions", headers=AUTH)
    assert reply.status_code == 405, reply.text
    error = error_of(reply)
    assert (error["type"], error["code"]) == ("invalid_request_error", "method_not_allowed")
    assert "GET /v1/decisions" in error["message"]
    assert reply.headers["allow"] == "POST"
    # The System One route's stays in its own envelope.
    assert set(app.get("/v1/systemone", headers=AUTH).json()) == {"detail"}
