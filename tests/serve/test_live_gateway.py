"""Live (marker `live`): the gateway in front of the embedded llama.cpp, asked by the official System One
SDK with its defaults and by plain HTTP; its limits, its failures and its shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from typesafe_sdk import Choice, Noul, Score, TypeSafeClient

from jevper.servers import SpawnedServer
from jevper.servers.gateway import spawn_gateway
from jevper.servers.llamacpp import spawn_llamacpp
from jevper.servers.process import PORT, Launch, launched

pytestmark = pytest.mark.live

KEY = "sk-live-gateway-6b1d"
STATE = "I was charged twice for the same subscription this month."
HEADERS = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def gateway() -> Iterator[SpawnedServer]:
    """The gateway with --spawn (the embedded llama.cpp, two slots) and a limit of two requests at once."""
    with spawn_gateway(api_key=KEY, options=("--limit-concurrency", "2")) as server:
        yield server


def root(server: SpawnedServer) -> str:
    return server.base_url.removesuffix("/v1")


def test_the_official_sdk_with_its_defaults_gets_every_question_type_answered(gateway: SpawnedServer) -> None:
    sdk = TypeSafeClient(base_url=root(gateway), api_key=KEY)  # sends model "jev-latest", its default
    response = sdk.system_one(
        STATE,
        {
            "topic": Choice(instructions="Which team?", criteria={"billing": None, "shipping": "parcels"}),
            "refund": Noul(instructions="Does the customer want money back?"),
            "urgency": Score(instructions="How urgent?", criteria=["can wait", "this week", "today"]),
        },
    )
    topic, refund, urgency = (response.answers[k] for k in ("topic", "refund", "urgency"))
    assert topic.type == "choice" and set(topic.probabilities) == {"billing", "shipping"}
    assert sum(topic.probabilities.values()) == pytest.approx(1.0)
    assert refund.type == "noul" and 0.0 <= refund.noul <= 1.0
    assert urgency.type == "score" and urgency.legend == {0: "can wait", 1: "this week", 2: "today"}
    assert urgency.score == pytest.approx(sum(i * p for i, p in urgency.probabilities.items()))
    assert response.model == gateway.model


def test_plain_http_gets_the_apis_body(gateway: SpawnedServer) -> None:
    body = {
        "state": {"customer": "Ann", "message": STATE},
        "questions": {
            "angry": {"type": "noul", "instructions": "Angry?", "criteria": {"true": "yes", "false": "no"}}
        },
    }
    reply = httpx.post(f"{gateway.base_url}/systemone", json=body, headers=HEADERS, timeout=120)
    assert reply.status_code == 200, reply.text
    answer = reply.json()["answers"]["angry"]
    assert answer["type"] == "noul" and 0.0 <= answer["noul"] <= 1.0
    assert set(reply.json()["usage"]) == {"input_tokens", "output_tokens"}


def test_a_wrong_key_is_a_401_and_a_huge_body_a_413(gateway: SpawnedServer) -> None:
    wrong = httpx.post(f"{gateway.base_url}/systemone", json={}, headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["detail"]["error_type"] == "authentication_error"
    huge = {"state": "x" * (5 * 1024 * 1024), "questions": {"q": {"type": "noul", "instructions": "?"}}}
    too_big = httpx.post(f"{gateway.base_url}/systemone", json=huge, headers=HEADERS, timeout=60)
    assert too_big.status_code == 413 and too_big.json()["detail"]["error_type"] == "request_too_large"


def test_a_burst_past_the_in_flight_limit_is_answered_with_429s_and_no_lost_or_mixed_answers(
    gateway: SpawnedServer,
) -> None:
    async def burst() -> list[tuple[str, httpx.Response]]:
        async with httpx.AsyncClient(timeout=300, headers=HEADERS) as client:

            async def ask(i: int) -> tuple[str, httpx.Response]:
                qid = f"question-{i}"
                body = {
                    "state": STATE,
                    "questions": {qid: {"type": "noul", "instructions": f"Is it case {i}?"}},
                }
                return qid, await client.post(f"{gateway.base_url}/systemone", json=body)

            return list(await asyncio.gather(*(ask(i) for i in range(6))))

    replies = asyncio.run(burst())
    statuses = [reply.status_code for _, reply in replies]
    assert set(statuses) == {200, 429}, statuses
    assert statuses.count(200) >= 1 and statuses.count(429) >= 1
    for qid, reply in replies:
        if reply.status_code == 200:
            assert list(reply.json()["answers"]) == [qid]  # its own answer, once
        else:
            assert reply.headers["retry-after"] == "1"


def test_an_upstream_killed_mid_request_is_a_502_within_the_timeout() -> None:
    with (
        spawn_llamacpp() as upstream,
        spawn_gateway(upstream=(upstream.base_url, upstream.model), options=("--timeout", "30")) as gateway,
    ):
        questions = {
            f"q{i}": {"type": "score", "instructions": "How urgent?", "criteria": ["a", "b", "c"]}
            for i in range(4)
        }

        async def ask_and_kill() -> tuple[httpx.Response, float]:
            async with httpx.AsyncClient(timeout=120) as client:
                started = time.monotonic()
                asked = asyncio.ensure_future(
                    client.post(
                        f"{gateway.base_url}/systemone", json={"state": STATE, "questions": questions}
                    )
                )
                await asyncio.sleep(0.3)
                os.kill(int(upstream.extra["pid"]), signal.SIGKILL)
                reply = await asked
                return reply, time.monotonic() - started

        reply, took = asyncio.run(ask_and_kill())
    assert reply.status_code == 502, reply.text
    assert reply.json()["detail"]["error_type"] == "upstream_error"
    assert took < 30


def test_sigterm_drains_the_request_in_flight_before_the_gateway_stops() -> None:
    with spawn_llamacpp() as upstream:
        command = [sys.executable, "-m", "jevper.serve", "--upstream", upstream.base_url]
        command += ["--model", upstream.model, "--port", PORT, "--log-level", "warning"]
        launch = Launch(name="jevper serve", command=command, env=dict(os.environ), log_prefix="jevper-serve")
        with launched(launch, identify=lambda _: "jevper", timeout=60) as running:
            gateway, url = running.process, running.root_url
            questions = {f"q{i}": {"type": "noul", "instructions": f"Is it case {i}?"} for i in range(3)}

            async def ask_then_stop() -> httpx.Response:
                async with httpx.AsyncClient(timeout=120) as client:
                    asked = asyncio.ensure_future(
                        client.post(f"{url}/v1/systemone", json={"state": STATE, "questions": questions})
                    )
                    await asyncio.sleep(0.3)
                    gateway.send_signal(signal.SIGTERM)
                    return await asked

            reply: Any = asyncio.run(ask_then_stop())
            assert reply.status_code == 200, reply.text
            assert list(reply.json()["answers"]) == list(questions)
            # Uvicorn answers what is in flight, then ends by the signal it was sent (its exit status).
            assert gateway.wait(timeout=30) in (0, -signal.SIGTERM)
