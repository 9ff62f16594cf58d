"""Closing the clients: ``close()``/``aclose()`` and the context managers end what a jevper client owns
(its worker threads, its questions in flight) and leave the caller's SDK client open; a failed async call
ends its other questions before its error leaves it. Against the loopback fault server, in scripted mode
where an answer is needed."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from jevper import AsyncSystemOneClient, Choice, ProviderError, SystemOneClient
from jevper.testing.bodies import chat_label
from jevper.testing.faults import running

INTENT = Choice(criteria={"billing": "money", "technical": "errors", "sales": "pricing"})
#: A healthy label answer, queued for every question.
LABEL = chat_label()
TWO = {"q": INTENT, "r": INTENT}


def workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("jevper_")]  # the pool's threads


def test_leaving_with_stops_the_worker_threads_refuses_calls_and_leaves_the_sdk_client_open(
    loopback: Any,
) -> None:
    for _ in range(3):
        loopback.reply("/chat/completions", 200, LABEL)
    sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    before = len(workers())
    with SystemOneClient(sdk, model="smollm2", api="chat_completions") as client:
        client.system_one(state="I was charged twice.", questions=TWO)  # two questions: the pool starts
        assert len(workers()) > before
    assert client.closed and len(workers()) == before
    with pytest.raises(RuntimeError, match="expected an open client, got one that was closed"):
        client.system_one(state="I was charged twice.", questions=TWO)
    client.close()  # again: nothing happens
    # The SDK client is the caller's and still answers, here through a new jevper client.
    again = SystemOneClient(sdk, model="smollm2", api="chat_completions")
    assert again.system_one(state="x", questions={"q": INTENT}).answers["q"].probabilities
    assert not sdk.is_closed()


def test_leaving_async_with_refuses_calls_and_leaves_the_sdk_client_open(loopback: Any) -> None:
    for _ in range(3):
        loopback.reply("/chat/completions", 200, LABEL)

    async def scenario() -> None:
        sdk = AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0)
        async with AsyncSystemOneClient(sdk, model="smollm2", api="chat_completions") as client:
            await client.system_one(state="I was charged twice.", questions=TWO)
        assert client.closed
        with pytest.raises(RuntimeError, match="expected an open client, got one that was closed"):
            await client.system_one(state="I was charged twice.", questions=TWO)
        await client.aclose()  # again: nothing happens
        assert not sdk.is_closed()
        again = AsyncSystemOneClient(sdk, model="smollm2", api="chat_completions")
        assert (await again.system_one(state="x", questions={"q": INTENT})).answers["q"].probabilities
        await sdk.close()

    asyncio.run(scenario())


def test_a_failed_async_call_ends_its_other_questions_before_its_error_leaves_it() -> None:
    with running() as server:
        # One question's request is refused at once (an HTML 500), the other's hangs.
        sdk = AsyncOpenAI(base_url=server.base_url("html-500", "hang-no-bytes"), api_key="l", max_retries=0)
        client = AsyncSystemOneClient(sdk, model=server.model, api="chat_completions", timeout=30)

        async def scenario() -> list[asyncio.Task[Any]]:
            with pytest.raises(ProviderError, match="500"):
                await client.system_one(state="I was charged twice.", questions=TWO)
            current = asyncio.current_task()
            return [t for t in asyncio.all_tasks() if t is not current and not t.done()]

        started = time.monotonic()
        assert asyncio.run(scenario()) == []
        assert time.monotonic() - started < 10  # the hanging question was cancelled, not waited out


def test_aclose_cancels_the_questions_running_and_returns_once_they_have_ended() -> None:
    with running() as server:
        sdk = AsyncOpenAI(base_url=server.base_url("hang-no-bytes"), api_key="l", max_retries=0)
        client = AsyncSystemOneClient(sdk, model=server.model, api="chat_completions", timeout=30)

        async def scenario() -> list[asyncio.Task[Any]]:
            call = asyncio.ensure_future(client.system_one(state="I was charged twice.", questions=TWO))
            while len(server.log) < 2:  # both requests reach the server and hang there
                await asyncio.sleep(0.05)
            await client.aclose()
            with pytest.raises(asyncio.CancelledError):
                await call
            current = asyncio.current_task()
            return [t for t in asyncio.all_tasks() if t is not current and not t.done()]

        started = time.monotonic()
        assert asyncio.run(scenario()) == []
        assert time.monotonic() - started < 10
