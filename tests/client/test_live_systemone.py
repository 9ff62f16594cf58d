"""Live (marker `live`): the client on System One routes: callo's answers read natively, llama.cpp's 501
for a chat model as a typed error, the same questions emulated on Chat Completions compared field by
field, and api="auto" finding a decision model (jevper's own gateway) by its model list."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from jevper import Choice, Noul, ProviderError, Score, SystemOneClient
from jevper.servers import SpawnedServer
from jevper.servers.callo import spawn_callo
from jevper.servers.gateway import spawn_gateway

pytestmark = pytest.mark.live

STATE = "I was charged twice for the same subscription this month."
QUESTIONS: dict[str, Choice | Noul | Score] = {
    "topic": Choice(
        instructions="What is the customer's message about?",
        criteria={"billing": "money, invoices, refunds", "shipping": None, "technical": "bugs, errors"},
    ),
    "refund": Noul("Does the customer want money back?", criteria={"true": "a refund", "false": "no refund"}),
    "urgency": Score(["can wait", "this week", "today"], instructions="How urgent is this?"),
}


@pytest.fixture(scope="module")
def callo() -> Iterator[SpawnedServer]:
    with spawn_callo() as server:
        yield server


def client(server: SpawnedServer, **settings: Any) -> SystemOneClient:
    sdk = OpenAI(base_url=server.base_url, api_key="local", max_retries=0)
    return SystemOneClient(sdk, model=server.model, timeout=120, **settings)


def choice_confidence(p: list[float]) -> float:
    n = len(p)
    return 1.0 if n == 1 else (max(p) - 1 / n) / (1 - 1 / n)


def score_confidence(p: list[float]) -> float:
    n = len(p)
    k = max(range(n), key=lambda i: p[i])
    spread = sum(p[i] * abs(i - k) for i in range(n))
    uniform = sum(abs(i - (n - 1) / 2) for i in range(n)) / n
    return max(0.0, 1 - spread / uniform)


def test_callo_answers_every_question_in_one_request_read_natively(callo: SystemOneClient) -> None:
    response = client(callo, api="systemone").system_one(state=STATE, questions=QUESTIONS)
    assert response.usage.n_calls == 1
    topic, refund, urgency = (response.answers[k] for k in QUESTIONS)
    assert (topic.method, topic.surface) == ("native", "systemone")
    assert tuple(topic.probabilities) == ("billing", "shipping", "technical")
    assert math.isclose(sum(topic.probabilities.values()), 1.0, abs_tol=1e-9)
    assert topic.confidence == pytest.approx(choice_confidence(list(topic.probabilities.values())), abs=1e-9)
    assert 0.0 <= refund.noul <= 1.0
    assert urgency.legend == {0: "can wait", 1: "this week", 2: "today"}
    assert urgency.confidence == pytest.approx(
        score_confidence(list(urgency.probabilities.values())), abs=1e-9
    )
    assert response.to_api()["answers"]["urgency"]["legend"] == {
        "0": "can wait",
        "1": "this week",
        "2": "today",
    }


def test_llamacpp_b11549_refuses_a_chat_model_with_a_501_naming_the_model_and_the_surfaces_that_answer(
    llamacpp: SpawnedServer,
) -> None:
    with pytest.raises(ProviderError) as refused:
        client(llamacpp, api="systemone").system_one(state=STATE, questions=QUESTIONS)
    assert refused.value.status == 501
    message = str(refused.value)
    assert llamacpp.model in message and "chat_completions" in message
    assert "This model is not a decision model" in refused.value.server_message


def test_a_native_and_an_emulated_answer_to_the_same_questions_have_the_same_fields(
    callo: SpawnedServer, llamacpp: SpawnedServer
) -> None:
    native = client(callo, api="systemone").system_one(state=STATE, questions=QUESTIONS)
    emulated = client(
        llamacpp, api="chat_completions", method="logprobs", extra_body={"temperature": 0, "max_tokens": 8}
    ).system_one(state=STATE, questions=QUESTIONS)
    native_body, emulated_body = native.to_api(), emulated.to_api()
    assert set(native_body) == set(emulated_body) == {"model", "answers", "usage"}
    for qid in QUESTIONS:
        mine, theirs = emulated_body["answers"][qid], native_body["answers"][qid]
        assert set(mine) == set(theirs), qid
        assert mine["type"] == theirs["type"]
        if "probabilities" in mine:
            assert set(mine["probabilities"]) == set(theirs["probabilities"])
        if "legend" in mine:
            assert mine["legend"] == theirs["legend"]
    # The same definitions on both: confidence from the probabilities, score their expectation.
    for response in (native, emulated):
        topic, urgency = response.answers["topic"], response.answers["urgency"]
        assert topic.confidence == pytest.approx(
            choice_confidence(list(topic.probabilities.values())), abs=1e-6
        )
        assert urgency.score == pytest.approx(sum(i * p for i, p in urgency.probabilities.items()), abs=1e-6)


def test_auto_asks_a_model_its_model_list_marks_as_a_decision_model_on_system_one() -> None:
    with spawn_gateway() as gateway:
        response = client(gateway).system_one(state=STATE, questions={"topic": QUESTIONS["topic"]})
    answer = response.answers["topic"]
    assert (answer.method, answer.surface) == ("native", "systemone")
    assert response.debug["route"]["surface"] == "systemone"


def test_auto_keeps_a_chat_model_on_the_chat_surfaces_when_its_model_list_says_text(
    callo: SpawnedServer,
) -> None:
    response = client(callo, extra_body={"temperature": 0, "max_tokens": 8}).system_one(
        state=STATE, questions={"topic": QUESTIONS["topic"]}
    )
    assert response.answers["topic"].surface in ("responses", "chat_completions")
