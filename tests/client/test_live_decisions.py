"""Live (marker `live`): OpenAI's Decisions API answered by the client over the embedded llama.cpp, whose
body the openai SDK's own ``Decision`` model takes."""

from __future__ import annotations

import asyncio
from typing import Any

import openai.types
import pytest
from openai import AsyncOpenAI, OpenAI

from jevper import AsyncSystemOneClient, SystemOneClient
from jevper.servers import SpawnedServer

pytestmark = pytest.mark.live

INPUT = [
    {"role": "developer", "content": "You sort customer support messages."},
    {"role": "user", "content": "I was charged twice for the same subscription this month. Refund me now!"},
]
QUESTIONS: list[dict[str, Any]] = [
    {"type": "predicate", "name": "refund", "instructions": "Does the customer ask for money back?"},
    {
        "type": "choice",
        "name": "topic",
        "instructions": "What is the message about?",
        "choices": [
            {"value": "billing", "description": "money, invoices, refunds, charges"},
            {"value": "technical", "description": "errors, crashes, login problems"},
            {"value": "sales", "description": "pricing, plans, upgrades"},
        ],
    },
    {
        "type": "choice",
        "instructions": "Is the customer polite?",
        "choices": [{"value": True}, {"value": False}],
    },
    {
        "type": "score",
        "name": "anger",
        "instructions": "How angry is the customer?",
        "levels": [
            {"label": "calm"},
            {"label": "annoyed", "description": "unhappy but civil"},
            {"label": "angry"},
        ],
    },
]
GREEDY = {"temperature": 0}


def checked(response: Any) -> openai.types.Decision:
    decision = openai.types.Decision.model_validate(response.to_api())
    assert [a.type for a in decision.answers if a.type != "refusal"] == [
        q["type"] for q, a in zip(QUESTIONS, decision.answers, strict=True) if a.type != "refusal"
    ]
    assert [a.name for a in decision.answers] == ["refund", "topic", None, "anger"]
    assert decision.usage.input_tokens > 0
    return decision


def test_the_blocking_client_answers_the_four_questions_in_the_decision_shape(
    llamacpp: SpawnedServer,
) -> None:
    sdk = OpenAI(base_url=llamacpp.base_url, api_key="local", max_retries=0)
    with SystemOneClient(sdk, model=llamacpp.model, extra_body=GREEDY) as client:
        decision = checked(client.decisions.create(input=INPUT, questions=QUESTIONS))
    assert all(a.type != "refusal" for a in decision.answers)
    right = decision.answers[2]
    assert right.type == "choice" and isinstance(right.choice, bool)
    assert {p.value for p in right.probabilities} == {True, False}


def test_the_async_client_gives_the_same_choices(llamacpp: SpawnedServer) -> None:
    async def ask() -> Any:
        sdk = AsyncOpenAI(base_url=llamacpp.base_url, api_key="local", max_retries=0)
        async with AsyncSystemOneClient(sdk, model=llamacpp.model, extra_body=GREEDY) as client:
            return await client.decisions.create(input=INPUT, questions=QUESTIONS)

    asynced = checked(asyncio.run(ask()))
    sdk = OpenAI(base_url=llamacpp.base_url, api_key="local", max_retries=0)
    blocking = checked(
        SystemOneClient(sdk, model=llamacpp.model, extra_body=GREEDY).decisions.create(
            input=INPUT, questions=QUESTIONS
        )
    )
    chosen = [getattr(a, "choice", None) for a in asynced.answers]
    assert chosen == [getattr(a, "choice", None) for a in blocking.answers]
