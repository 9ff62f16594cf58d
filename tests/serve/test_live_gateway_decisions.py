"""Live (marker `live`): the official `openai` SDK's `decisions.create` against `python -m jevper.serve`
in front of the embedded llama.cpp (SmolLM2): every question type answered in order, typed, each
distribution summing to 1; bad requests a BadRequestError, a wrong key an AuthenticationError; and
jevper's own client, asking the embedded server directly and the gateway natively, giving the same
choices."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types import Decision

from jevper import SystemOneClient
from jevper.servers import SpawnedServer
from jevper.servers.gateway import spawn_gateway

pytestmark = pytest.mark.live

KEY = "sk-live-decisions-91ad"
INPUT = "I was charged twice for the same subscription this month and I want my money back."
PREDICATE = {"type": "predicate", "name": "refund", "instructions": "The customer asks for money back."}
STRINGS = {
    "type": "choice",
    "name": "team",
    "instructions": "Which team should answer?",
    "choices": [
        {"value": "billing", "description": "charges and invoices"},
        {"value": "shipping", "description": "parcels"},
        {"value": "technical"},
    ],
}
BOOLEANS = {
    "type": "choice",
    "instructions": "Is the customer angry?",
    "choices": [{"value": True}, {"value": False}],
}
SCORE = {
    "type": "score",
    "name": "urgency",
    "instructions": "How urgent is it?",
    "levels": [
        {"label": "low", "description": "can wait"},
        {"label": "medium", "description": "this week"},
        {"label": "high", "description": "today"},
    ],
}
QUESTIONS: list[Any] = [PREDICATE, STRINGS, BOOLEANS, SCORE]


@pytest.fixture(scope="module")
def gateway() -> Iterator[SpawnedServer]:
    """The gateway with --spawn (the embedded llama.cpp) and a key."""
    with spawn_gateway(api_key=KEY, options=("--timeout", "300")) as server:
        yield server


def sdk(gateway: SpawnedServer, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0, timeout=300)


def test_the_official_sdk_gets_a_predicate_two_choices_and_a_score_typed_and_in_order(
    gateway: SpawnedServer,
) -> None:
    decision = sdk(gateway).decisions.create(model=gateway.model, input=INPUT, questions=QUESTIONS)
    assert isinstance(decision, Decision)
    assert [a.type for a in decision.answers] == ["predicate", "choice", "choice", "score"]
    assert [a.name for a in decision.answers] == ["refund", "team", None, "urgency"]
    predicate, team, angry, urgency = decision.answers
    assert predicate.type == "predicate" and 0.0 <= predicate.probability <= 1.0
    assert team.type == "choice" and [p.value for p in team.probabilities] == [
        "billing",
        "shipping",
        "technical",
    ]
    assert team.choice in ("billing", "shipping", "technical")
    assert angry.type == "choice" and [p.value for p in angry.probabilities] == [True, False]
    assert isinstance(angry.choice, bool)
    assert urgency.type == "score" and [p.label for p in urgency.probabilities] == ["low", "medium", "high"]
    for answer in (team, angry, urgency):
        assert sum(p.probability for p in answer.probabilities) == pytest.approx(1.0)
    assert urgency.score == pytest.approx(sum(p.value * p.probability for p in urgency.probabilities))
    assert decision.usage.input_tokens > 0


@pytest.mark.parametrize(
    ("questions", "said"),
    [
        ([{**STRINGS, "choices": [{"value": "billing"}]}], "expected 2 to 255 choices, got 1"),
        (
            [{**STRINGS, "choices": [{"value": "billing"}, {"value": "billing"}]}],
            "expected each value once, got 'billing' again",
        ),
        ([], "expected 1 to 400 questions, got none"),
        ([{**PREDICATE, "type": "rank"}], "expected 'predicate', 'choice' or 'score', got 'rank'"),
    ],
    ids=["one-option", "duplicate-values", "no-questions", "unknown-type"],
)
def test_an_invalid_request_raises_bad_request_error_with_a_message(
    gateway: SpawnedServer, questions: list[Any], said: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk(gateway).decisions.create(model=gateway.model, input=INPUT, questions=questions)
    assert refused.value.status_code == 400
    assert said in refused.value.message
    assert refused.value.param is not None and refused.value.param.startswith("questions")


def test_a_wrong_key_raises_authentication_error(gateway: SpawnedServer) -> None:
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk(gateway, key="sk-not-this-one").decisions.create(
            model=gateway.model, input=INPUT, questions=[PREDICATE]
        )
    assert refused.value.status_code == 401


def test_the_client_gives_the_same_choices_directly_and_through_the_gateway_natively(
    gateway: SpawnedServer, llamacpp: SpawnedServer
) -> None:
    questions = [STRINGS, BOOLEANS]
    direct = SystemOneClient(
        openai.OpenAI(base_url=llamacpp.base_url, api_key="none", max_retries=0), model=llamacpp.model
    ).decisions.create(input=INPUT, questions=questions)
    native = SystemOneClient(
        openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0, timeout=300),
        model=gateway.model,
        api="decisions",
    ).decisions.create(input=INPUT, questions=questions)
    first, second = Decision.model_validate(direct.to_api()), Decision.model_validate(native.to_api())
    assert [a.choice for a in first.answers] == [a.choice for a in second.answers]
