"""``decisions.create`` answered from the client's answer cache (``cache=PATH``) by ``system_one``'s key
rules, against the scripted loopback server (a request nobody queued a reply for is a 599): a call asked
before sends no request; another question, input or model misses; a call with a refusal is not kept; a
Decisions call and a System One call about the same text never answer one another; the async client
reads what the blocking one wrote; the gateway's /v1/decisions counts its hits."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import openai.types
from _decisions_data import INPUT, QUESTIONS, REFUSAL
from openai import AsyncOpenAI, OpenAI
from starlette.testclient import TestClient

from jevper import AsyncSystemOneClient, Noul, SystemOneClient
from jevper.decisions import DecisionRefusal
from jevper.serve import GatewayConfig, create_app
from jevper.testing.bodies import chat_label
from jevper.testing.faults import running


def client(loopback: Any, cache: Path, **options: Any) -> SystemOneClient:
    sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    settings = {"api": "chat_completions", "method": "logprobs", "max_concurrency": 1, **options}
    return SystemOneClient(sdk, model="m", cache=str(cache), **settings)


def sent(loopback: Any) -> int:
    return len(loopback.bodies("/chat/completions"))


def answer_twice(loopback: Any) -> None:
    for _ in range(2):
        loopback.reply("/chat/completions", 200, chat_label())


def test_a_decisions_call_asked_before_is_answered_from_the_cache_without_a_request(
    loopback: Any, tmp_path: Path
) -> None:
    path = tmp_path / "answers.sqlite"
    answer_twice(loopback)
    first = client(loopback, path).decisions.create(input=INPUT, questions=QUESTIONS)
    assert sent(loopback) == 2 and first.usage.requests == 2
    assert first.debug["cache"]["hit"] is False and first.debug["cache"]["written"] is True
    again = client(loopback, path).decisions.create(input=INPUT, questions=QUESTIONS)
    assert sent(loopback) == 2
    assert again.answers == first.answers and again.model == first.model
    assert (again.usage.requests, again.usage.input_tokens, again.usage.output_tokens) == (0, 0, 0)
    assert again.debug["cache"] == {"hit": True, "file": str(path), "key": first.debug["cache"]["key"]}
    openai.types.Decision.model_validate(again.to_api())


def test_another_question_input_or_model_misses(loopback: Any, tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    answer_twice(loopback)
    client(loopback, path).decisions.create(input=INPUT, questions=QUESTIONS)
    renamed = copy.deepcopy(QUESTIONS)
    renamed[1]["choices"][1]["value"] = "delivery"
    changes: list[dict[str, Any]] = [
        {"questions": renamed},
        {"input": INPUT + " Again."},
        {"model": "another"},
    ]
    for change in changes:
        answer_twice(loopback)
        before = sent(loopback)
        asked = {"input": INPUT, "questions": QUESTIONS, **change}
        response = client(loopback, path).decisions.create(**asked)
        assert sent(loopback) == before + 2, change
        assert response.debug["cache"]["hit"] is False


def test_a_call_with_a_refused_question_is_not_kept(loopback: Any, tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    loopback.reply("/chat/completions", 200, chat_label())
    loopback.reply("/chat/completions", 200, REFUSAL)
    first = client(loopback, path).decisions.create(input=INPUT, questions=QUESTIONS)
    assert isinstance(first.answers[1], DecisionRefusal)
    assert first.debug["cache"]["written"] is False
    answer_twice(loopback)
    again = client(loopback, path).decisions.create(input=INPUT, questions=QUESTIONS)
    assert sent(loopback) == 4 and not isinstance(again.answers[1], DecisionRefusal)


def test_a_system_one_call_about_the_same_text_is_not_answered_by_a_decisions_call(
    loopback: Any, tmp_path: Path
) -> None:
    path = tmp_path / "answers.sqlite"
    loopback.reply("/chat/completions", 200, chat_label())
    asked = [QUESTIONS[0]]
    client(loopback, path).decisions.create(input=INPUT, questions=asked)
    loopback.reply("/chat/completions", 200, chat_label())
    noul = Noul(instructions="Does the customer want money back?")
    response = client(loopback, path).system_one(state=INPUT, questions={"questions[0]": noul})
    assert sent(loopback) == 2 and response.debug["cache"]["hit"] is False


def test_the_async_client_reads_a_decisions_call_the_blocking_one_wrote(
    loopback: Any, tmp_path: Path
) -> None:
    path = tmp_path / "answers.sqlite"
    answer_twice(loopback)
    first = client(loopback, path).decisions.create(input=INPUT, questions=QUESTIONS)

    async def asked() -> Any:
        sdk = AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0)
        async with AsyncSystemOneClient(
            sdk, model="m", api="chat_completions", method="logprobs", cache=path
        ) as asking:
            return await asking.decisions.create(input=INPUT, questions=QUESTIONS)

    again = asyncio.run(asked())
    assert sent(loopback) == 2 and again.answers == first.answers and again.debug["cache"]["hit"]


def test_the_gateways_decisions_route_counts_its_cache_hits_and_misses(tmp_path: Path) -> None:
    with running(model="smollm2") as upstream:
        config = GatewayConfig(
            upstream=upstream.base_url(),
            model="smollm2",
            api="chat_completions",
            cache=str(tmp_path / "answers.sqlite"),
        )
        body = {"model": "smollm2", "input": INPUT, "questions": QUESTIONS}
        with TestClient(create_app(config)) as gateway:
            first = gateway.post("/v1/decisions", json=body)
            posts = sum(served.method == "POST" for served in upstream.log)
            again = gateway.post("/v1/decisions", json=body)
            metrics = gateway.get("/metrics").text
        assert first.status_code == again.status_code == 200
        assert sum(served.method == "POST" for served in upstream.log) == posts
        assert again.json()["answers"] == first.json()["answers"]
        for outcome in ("hit", "miss"):
            line = f'jevper_serve_cache_lookups_total{{outcome="{outcome}",route="/v1/decisions"}} 1.0'
            assert line in metrics
