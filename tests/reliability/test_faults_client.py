"""SystemOneClient, wrapping the real openai and anthropic SDKs, against a server that misbehaves: a typed
JevperError naming expected and arrived, within the timeout and the bounded retries, and never a
distribution that is not one.

Retries are jevper's (jevper/_transport.py): the SDK client's own are turned off per request and jevper makes
as many as the client's max_retries says, only for 408/409/429/502/503/504 and broken connections.
"""

from __future__ import annotations

import asyncio
import math
import time
import tracemalloc
from typing import Any

import anthropic
import openai
import pytest
from _chains import acyclic

from jevper import (
    AsyncSystemOneClient,
    Choice,
    JevperError,
    LabelReadoutError,
    MalformedAnswerError,
    ProviderError,
    RetryPolicy,
    SystemOneClient,
)
from jevper._transport import MAX_BODY_BYTES
from jevper.testing.faults import FAULTS, HUGE_BYTES, RETRY_AFTER_S, FaultServer

TIMEOUT = 1.0
#: A hang is cut off at whatever the timeout is, and no answer is awaited within it: the matrices give the
#: calls that meet one a short timeout (test_a_timeout_is_not_retried_so_a_hang_costs_one_timeout keeps
#: TIMEOUT).
HANGS, HANG_TIMEOUT = {"hang-no-bytes", "hang-after-headers"}, 0.3
#: The retries each surface's SDK client allows in the fault matrix: the SDKs' default (2) on Chat
#: Completions; 1 on the others, which shows the count follows the client's max_retries
#: (test_a_client_with_max_retries_0_asks_a_busy_server_once shows 0).
RETRIES = {"chat_completions": 2, "responses": 1, "messages": 1}
QUESTION = Choice(criteria={"billing": "money, invoices", "technical": "errors, crashes", "sales": "pricing"})
SURFACES = ("chat_completions", "responses", "messages")
ANSWER = None  # the fault leaves a readable answer: a real distribution is the right outcome

# Per surface (Chat Completions and Responses asked by logprobs, Messages in JSON): the error class,
# or ANSWER. Where Messages answers, its fault is in a place its JSON answer does not use.
EXPECTED: dict[str, tuple[type[JevperError] | None, ...]] = {
    "hang-no-bytes": (ProviderError,) * 3,
    "hang-after-headers": (ProviderError,) * 3,
    "connection-reset": (ProviderError,) * 3,
    "html-500": (ProviderError,) * 3,
    "502-retry-after": (ProviderError,) * 3,
    "503-retry-after": (ProviderError,) * 3,
    "429-retry-after": (ProviderError,) * 3,
    "429-retry-after-hour": (ProviderError,) * 3,
    "truncated-json": (MalformedAnswerError,) * 3,
    "non-json-body": (MalformedAnswerError,) * 3,
    "wrong-content-type": (ANSWER,) * 3,
    "html-404": (ProviderError,) * 3,
    "invalid-utf8-content": (MalformedAnswerError,) * 3,
    "invalid-utf8-reasoning": (MalformedAnswerError,) * 3,
    "nan-logprob": (MalformedAnswerError,) * 3,
    "infinity-logprob": (MalformedAnswerError,) * 3,
    "positive-logprob": (MalformedAnswerError,) * 3,
    "short-logprobs": (LabelReadoutError, LabelReadoutError, MalformedAnswerError),
    "duplicate-alternatives": (MalformedAnswerError,) * 3,
    "empty-choices": (MalformedAnswerError,) * 3,
    "null-choices": (MalformedAnswerError,) * 3,
    "embedded-error": (ProviderError,) * 3,
    "huge-body": (MalformedAnswerError,) * 3,
}
#: How many requests the server should see: retried statuses and connections are asked 1 + RETRIES times.
RETRIED = {"connection-reset", "502-retry-after", "503-retry-after", "429-retry-after"}
#: The wall-clock bound per call: one timeout, the waits of the retries, and slack for a shared box.
#: jevper's own retries without their backoff: how long it waits is not what these tests prove
#: (tests/reliability/test_retry_policy.py does), and it cost a connection reset 1.5 s.
QUICK = RetryPolicy(base_delay=0.01, max_delay=0.01)
BOUND_S = TIMEOUT + max(RETRIES.values()) * max(RETRY_AFTER_S, 1.0) + 2.0


def test_every_fault_has_an_expected_client_outcome() -> None:
    assert set(EXPECTED) | {"ok", "crash", "slow-drip", "slow-drip-error"} == set(FAULTS)


def _client(
    faults: FaultServer,
    fault: str,
    surface: str,
    method: Any = "auto",
    timeout: float = TIMEOUT,
    retry: RetryPolicy | None = None,
    **sdk: Any,
) -> SystemOneClient:
    base = faults.base_url(fault)
    if surface == "messages":
        messages = anthropic.Anthropic(base_url=base.removesuffix("/v1"), api_key="local", **sdk)
        return SystemOneClient(
            messages,
            model="fault-model",
            api="messages",
            method=method,
            timeout=timeout,
            retry=retry,
        )
    chat = openai.OpenAI(base_url=base, api_key="local", **sdk)
    return SystemOneClient(
        chat, model="fault-model", api=surface, method="logprobs", timeout=timeout, retry=retry
    )


def assert_a_distribution(probabilities: dict[str, float]) -> None:
    assert set(probabilities) == set(QUESTION.options)
    assert all(math.isfinite(p) and p >= 0 for p in probabilities.values())
    assert math.isclose(sum(probabilities.values()), 1.0, rel_tol=1e-9)


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_each_fault_ends_in_a_typed_error_or_a_real_distribution_within_the_bound(
    faults_at_once: FaultServer, fault: str, surface: str
) -> None:
    faults = faults_at_once
    expected = EXPECTED[fault][SURFACES.index(surface)]
    retries = {} if surface == "chat_completions" else {"max_retries": RETRIES[surface]}
    timeout = HANG_TIMEOUT if fault in HANGS else TIMEOUT
    # jevper retries where the SDK is told not to (its own retries keep their backoff).
    quick = QUICK if surface == "chat_completions" else None
    client = _client(faults, fault, surface, timeout=timeout, retry=quick, **retries)
    seen = len(faults.log)
    started = time.monotonic()
    try:
        answer = client.system_one(state="I was charged twice.", questions={"intent": QUESTION})
    except Exception as error:
        elapsed = time.monotonic() - started
        assert type(error) is expected, f"{type(error).__name__}: {error}"
        assert "expected" in str(error), str(error)
        acyclic(error)
    else:
        elapsed = time.monotonic() - started
        assert expected is ANSWER, f"expected {expected}, got an answer"
        assert_a_distribution(answer.answers["intent"].probabilities)  # type: ignore[union-attr]
    assert elapsed < BOUND_S, f"{elapsed:.2f} s"
    assert not faults.crashed
    asked = len(faults.log) - seen
    if fault in RETRIED:
        assert asked == 1 + RETRIES[surface]
    else:
        # The first request and at most the one corrective retry of a readout; on Messages, method="auto"
        # may then ask once more for one option (discrete), with its own corrective retry.
        assert asked <= (4 if surface == "messages" else 2)


def test_a_retry_after_longer_than_the_cap_is_reported_at_once_with_the_wait_asked_for(
    faults: FaultServer,
) -> None:
    started = time.monotonic()
    with pytest.raises(ProviderError, match="3600 s") as raised:
        _client(faults, "429-retry-after-hour", "messages").system_one(state="x", questions={"q": QUESTION})
    assert time.monotonic() - started < 1.0
    assert raised.value.status == 429


def test_a_server_with_a_delay_holds_each_answer_that_long_and_then_answers() -> None:
    # The benchmarks' stand-in for a server that takes time (a model server's latency).
    with FaultServer(delay=0.4) as slow:
        chat = openai.OpenAI(base_url=slow.base_url(), api_key="local", max_retries=0)
        client = SystemOneClient(chat, model="fault-model", api="chat_completions", timeout=30.0)
        started = time.perf_counter()
        answered = client.system_one(state="I was charged twice", questions={"q": QUESTION})
        assert time.perf_counter() - started >= 0.4
    assert_a_distribution(answered.to_api()["answers"]["q"]["probabilities"])
    assert [served.fault for served in slow.log if served.method == "POST"] == ["ok"]


def test_a_client_with_max_retries_0_asks_a_busy_server_once(faults: FaultServer) -> None:
    seen = len(faults.log)
    with pytest.raises(ProviderError):
        _client(faults, "503-retry-after", "chat_completions", max_retries=0).system_one(
            state="x", questions={"q": QUESTION}
        )
    assert len(faults.log) - seen == 1


def test_a_timeout_is_not_retried_so_a_hang_costs_one_timeout(faults: FaultServer) -> None:
    seen = len(faults.log)
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"expected an answer within the [0-9.]+ s timeout"):
        _client(faults, "hang-no-bytes", "responses", timeout=HANG_TIMEOUT, max_retries=5).system_one(
            state="x", questions={"q": QUESTION}
        )
    assert time.monotonic() - started < HANG_TIMEOUT + 1.0
    assert len(faults.log) - seen == 1


def test_a_busy_server_that_recovers_is_answered_after_the_retry_after_wait(faults: FaultServer) -> None:
    client = SystemOneClient(
        openai.OpenAI(base_url=faults.base_url("503-retry-after", "ok"), api_key="local"),
        model="fault-model",
        api="chat_completions",
        method="logprobs",
        timeout=TIMEOUT,
    )
    started = time.monotonic()
    answer = client.system_one(state="x", questions={"q": QUESTION}).answers["q"]
    assert time.monotonic() - started >= RETRY_AFTER_S
    assert answer.choice == "billing"  # type: ignore[union-attr]
    assert_a_distribution(answer.probabilities)  # type: ignore[union-attr]


def test_a_50_mb_body_is_refused_at_the_size_cap_with_memory_bounded_by_the_cap(faults: FaultServer) -> None:
    client = _client(faults, "huge-body", "chat_completions")
    tracemalloc.start()
    try:
        with pytest.raises(MalformedAnswerError, match=f"at most {MAX_BODY_BYTES // 2**20} MiB"):
            client.system_one(state="x", questions={"q": QUESTION})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Measured: 35 MiB (async: 45 MiB) for the 32 MiB cap; the whole 50 MB body had cost 150 MiB.
    assert MAX_BODY_BYTES < HUGE_BYTES
    assert peak < 2 * MAX_BODY_BYTES, f"peak {peak / 2**20:.0f} MiB"


def test_a_json_answer_naming_a_key_twice_is_malformed_and_the_error_names_the_key(
    faults: FaultServer,
) -> None:
    with pytest.raises(MalformedAnswerError, match=r"expected each key once .*'billing' twice"):
        _client(faults, "duplicate-alternatives", "messages", method="structured").system_one(
            state="x", questions={"q": QUESTION}
        )


def test_an_empty_responses_output_is_malformed_and_auto_keeps_the_model_on_responses(
    faults: FaultServer,
) -> None:
    sdk = openai.OpenAI(base_url=faults.base_url("empty-choices", "ok"), api_key="local")
    client = SystemOneClient(sdk, model="fault-model", api="auto", timeout=TIMEOUT)
    seen = len(faults.log)
    with pytest.raises(MalformedAnswerError, match="expected an answer message, got none"):
        client.system_one(state="x", questions={"q": QUESTION})
    # One empty answer is not evidence about the surface: the next question is asked there, by the label
    # readout (auto sends the label grammar from the first request).
    answer = client.system_one(state="x", questions={"q": QUESTION})
    # api="auto" asks GET /models once first (the fault server lists no decision model), and Ollama's
    # POST /api/show for the model it lists (no such route here); the surfaces' POSTs count.
    posts = [(e.path, e.surface) for e in faults.log[seen:] if e.method == "POST"]
    assert [surface for _, surface in posts] == [None, "responses", "responses"]
    assert posts[0][0] == "/api/show"
    assert answer.debug["route"]["surface"] == "responses"
    assert answer.debug["questions"]["q"]["method"] == "grammar"
    assert_a_distribution(answer.answers["q"].probabilities)  # type: ignore[union-attr]


@pytest.mark.parametrize("drip", ["slow-drip", "slow-drip-error"])
# One surface per SDK: the deadline cuts the body where jevper or the SDK reads it, before a surface
# parses it, and Responses is read by the openai SDK as Chat Completions is.
@pytest.mark.parametrize("surface", ["chat_completions", "messages"])
def test_a_slow_drip_is_cut_off_at_the_timeout_and_the_next_question_is_answered(
    faults: FaultServer, surface: str, drip: str
) -> None:
    # The drip's body takes 6 s; the SDK's timeout bounds each read, jevper's deadline the whole answer,
    # also when the body is an error the SDK reads by itself before raising.
    base = faults.base_url(drip, "ok")
    if surface == "messages":
        sdk: Any = anthropic.Anthropic(base_url=base.removesuffix("/v1"), api_key="local")
    else:
        sdk = openai.OpenAI(base_url=base, api_key="local")
    method = "auto" if surface == "messages" else "logprobs"
    client = SystemOneClient(sdk, model="fault-model", api=surface, method=method, timeout=TIMEOUT)
    started = time.monotonic()
    with pytest.raises(ProviderError, match=f"whole answer within the {TIMEOUT:g} s timeout") as raised:
        client.system_one(state="x", questions={"q": QUESTION})
    assert time.monotonic() - started < TIMEOUT + 0.5
    assert raised.value.kind == "timeout"
    # The cut connection is not reused: the same client answers the next question at once.
    answer = client.system_one(state="x", questions={"q": QUESTION})
    assert_a_distribution(answer.answers["q"].probabilities)  # type: ignore[union-attr]


@pytest.mark.parametrize("fault", ["hang-no-bytes", "503-retry-after", "nan-logprob", "truncated-json"])
def test_the_async_client_meets_the_same_faults_with_the_same_errors(
    faults_at_once: FaultServer, fault: str
) -> None:
    faults = faults_at_once

    async def ask() -> None:
        # One retry: the same error (the sync matrix counts the retries).
        sdk = openai.AsyncOpenAI(base_url=faults.base_url(fault), api_key="local", max_retries=1)
        timeout = HANG_TIMEOUT if fault in HANGS else TIMEOUT
        client = AsyncSystemOneClient(
            sdk, model="fault-model", api="chat_completions", method="logprobs", timeout=timeout
        )
        await client.system_one(state="x", questions={"q": QUESTION})

    started = time.monotonic()
    with pytest.raises(EXPECTED[fault][0]):  # type: ignore[arg-type]
        asyncio.run(ask())
    assert time.monotonic() - started < BOUND_S


def test_the_async_client_refuses_a_50_mb_body_at_the_size_cap_with_memory_bounded_by_the_cap(
    faults: FaultServer,
) -> None:
    async def ask() -> None:
        sdk = openai.AsyncOpenAI(base_url=faults.base_url("huge-body"), api_key="local")
        client = AsyncSystemOneClient(
            sdk, model="fault-model", api="chat_completions", method="logprobs", timeout=10.0
        )
        await client.system_one(state="x", questions={"q": QUESTION})

    tracemalloc.start()
    try:
        with pytest.raises(MalformedAnswerError, match=f"at most {MAX_BODY_BYTES // 2**20} MiB"):
            asyncio.run(ask())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_BODY_BYTES, f"peak {peak / 2**20:.0f} MiB"


def test_the_async_client_cuts_a_slow_drip_off_at_the_timeout(faults: FaultServer) -> None:
    async def ask() -> None:
        sdk = openai.AsyncOpenAI(base_url=faults.base_url("slow-drip"), api_key="local")
        client = AsyncSystemOneClient(sdk, model="fault-model", api="chat_completions", timeout=HANG_TIMEOUT)
        await client.system_one(state="x", questions={"q": QUESTION})

    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"expected an answer within the [0-9.]+ s timeout"):
        asyncio.run(ask())
    assert time.monotonic() - started < HANG_TIMEOUT + 1.0


@pytest.mark.parametrize("api", ["chat_completions", "messages", "systemone"])
def test_a_call_leaves_the_callers_http_client_hooks_as_they_were_and_runs_them(
    faults: FaultServer, api: str
) -> None:
    from jevper import _deadline

    statuses: list[int] = []
    own = {"request": [], "response": [lambda response: statuses.append(response.status_code)]}
    base = faults.base_url("ok")
    sdk: Any
    if api == "messages":
        http = anthropic.DefaultHttpxClient(event_hooks=own)
        sdk = anthropic.Anthropic(base_url=base.removesuffix("/v1"), api_key="local", http_client=http)
    else:
        http = openai.DefaultHttpxClient(event_hooks=own)
        sdk = openai.OpenAI(base_url=base, api_key="local", http_client=http)
    before = {name: list(hooks) for name, hooks in http.event_hooks.items()}
    client = SystemOneClient(sdk, model="fault-model", api=api, timeout=TIMEOUT)
    for _ in range(2):
        client.system_one(state="x", questions={"q": QUESTION})
    assert {name: list(hooks) for name, hooks in http.event_hooks.items()} == before
    assert statuses == [200, 200]
    assert _deadline.CURRENT.get() is None
