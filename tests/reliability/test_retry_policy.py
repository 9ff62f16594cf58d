"""Which refusals are retried, and when: a 400 never; concurrent retries spread apart by jitter."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from jevper import AsyncSystemOneClient, Choice, ProviderError, SystemOneClient
from jevper._failure import JITTER, judge, retry_delay
from jevper.testing.bodies import chat_label
from jevper.testing.faults import running
from jevper.testing.script import Request, Script

INTENT = Choice(criteria={"billing": "money", "technical": "errors"})
LABEL = chat_label()
REFUSAL = {"error": {"message": "Field 'top_logprobs': must be an integer", "type": "invalid_request_error"}}


@pytest.fixture
def script() -> Iterator[tuple[Script, str]]:
    state = Script()
    with running(script=state) as server:
        yield state, server.base_url()


def asked(url: str, **settings: Any) -> SystemOneClient:
    sdk = OpenAI(base_url=url, api_key="local", max_retries=3)
    return SystemOneClient(sdk, model="m", method="logprobs", api="chat_completions", **settings)


def test_a_400_is_never_retried_by_a_client_that_allows_three_retries(script: tuple[Script, str]) -> None:
    state, url = script
    state.reply("/chat/completions", 400, REFUSAL)
    state.reply("/chat/completions", 200, LABEL)  # what a retry would have got
    with pytest.raises(ProviderError) as refused:
        asked(url).system_one(state="Charged twice.", questions={"q": INTENT})
    assert refused.value.status == 400
    assert len(state.requests) == 1


def test_the_async_client_never_retries_a_400_either(script: tuple[Script, str]) -> None:
    state, url = script
    state.reply("/chat/completions", 400, REFUSAL)
    state.reply("/chat/completions", 200, LABEL)
    client = AsyncSystemOneClient(
        AsyncOpenAI(base_url=url, api_key="local", max_retries=3),
        model="m",
        method="logprobs",
        api="chat_completions",
    )
    with pytest.raises(ProviderError, match="400"):
        asyncio.run(client.system_one(state="Charged twice.", questions={"q": INTENT}))
    assert len(state.requests) == 1


def refused(status: int) -> ProviderError:
    return ProviderError("x", status=status, server_message="x")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 500, 501])
def test_a_refusal_is_not_a_reason_to_retry(status: int) -> None:
    assert not judge(refused(status)).retry


@pytest.mark.parametrize("status", [408, 409, 429, 502, 503, 504])
def test_not_now_statuses_are_retried(status: int) -> None:
    assert judge(refused(status)).retry


def test_the_delay_never_comes_before_the_servers_retry_after_and_backoff_never_exceeds_its_base() -> None:
    assert retry_delay(0, 2.0, lambda: 0.0) == 2.0
    assert retry_delay(0, 2.0, lambda: 1.0) == 2.0 * (1 + JITTER)
    assert retry_delay(2, None, lambda: 0.0) == 4.5
    assert retry_delay(2, None, lambda: 1.0) == 4.5 * (1 - JITTER)
    assert retry_delay(10, None, lambda: 0.0) == 8.0


def test_eight_questions_meeting_the_same_429_come_back_at_spread_instants(
    script: tuple[Script, str],
) -> None:
    state, url = script
    questions = {
        f"q{i}": Choice(criteria=INTENT.criteria, instructions=f"Case {i}: which team?") for i in range(8)
    }
    for _ in questions:
        state.reply("/chat/completions", 429, {"error": {"message": "busy"}}, headers=[("retry-after", "1")])
    for _ in questions:
        state.reply("/chat/completions", 200, LABEL)
    response = asked(url).system_one(state="Charged twice.", questions=questions)
    assert len(response.answers) == 8
    first, retries = state.requests[:8], state.requests[8:]
    assert len(retries) == 8

    def case(request: Request) -> bytes:
        return next(f"Case {i}:".encode() for i in range(8) if f"Case {i}:".encode() in request.body)

    # Never sooner than asked: each question's retry comes at least the Retry-After after its refusal.
    refused_at = {case(r): r.received_at for r in first}
    assert all(r.received_at - refused_at[case(r)] >= 0.95 for r in retries)
    # Without jitter all eight came back within a few milliseconds of each other (and met the 429 again).
    spread = max(r.received_at for r in retries) - min(r.received_at for r in retries)
    assert spread >= 0.05, f"the eight retries came within {spread * 1000:.0f} ms"
