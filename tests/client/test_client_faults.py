"""The client against every fault of jevper.testing.faults, on each surface: it answers with a valid
distribution or raises a JevperError — never another exception, never a hang past its timeout."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _chains import acyclic
from anthropic import Anthropic, AsyncAnthropic
from openai import AsyncOpenAI, OpenAI

from jevper import AsyncSystemOneClient, Choice, JevperError, ProviderError, SystemOneClient, _deadline
from jevper.testing.faults import FAULTS, FaultServer, running

INTENT = Choice(criteria={"billing": "money", "technical": "errors", "sales": "pricing"})
TIMEOUT = 1.0
#: The faults that answer nothing within any timeout: cut off at whatever it is, so the matrix gives them a
#: short one.
HANGS, HANG_TIMEOUT = {"hang-no-bytes", "hang-after-headers", "slow-drip-error"}, 0.3
#: Run on their own: seconds or minutes per request, or (crash) a server that stays down afterwards.
SEPARATE = {"slow-drip", "huge-body", "429-retry-after-hour", "crash"}


@pytest.fixture(scope="module")
def faults() -> Iterator[FaultServer]:
    with running() as server:
        yield server


def blocking(base_url: str, api: str, model: str, timeout: float = TIMEOUT) -> SystemOneClient:
    if api == "messages":
        sdk: Any = Anthropic(base_url=base_url.removesuffix("/v1"), api_key="local", max_retries=0)
    else:
        sdk = OpenAI(base_url=base_url, api_key="local", max_retries=0)
    return SystemOneClient(sdk, model=model, api=api, timeout=timeout)


def check(outcome: object) -> None:
    if isinstance(outcome, Exception):
        assert isinstance(outcome, JevperError), f"{type(outcome).__name__}: {outcome}"
        acyclic(outcome)
        return
    answer: Any = getattr(outcome, "answers")["q"]  # noqa: B009
    assert tuple(answer.probabilities) == INTENT.options
    assert math.isclose(sum(answer.probabilities.values()), 1.0, abs_tol=1e-9)


# The reliability matrix (tests/reliability/test_faults_client.py) asks the same faults on the same three
# surfaces and asserts the exact error, its chain and the requests sent: this one only repeats its proof.
@pytest.mark.slow
@pytest.mark.parametrize("api", ["chat_completions", "responses", "messages"])
@pytest.mark.parametrize("fault", sorted(set(FAULTS) - SEPARATE))
def test_every_fault_ends_in_an_answer_or_a_jevper_error_within_the_timeout(
    faults: FaultServer, fault: str, api: str
) -> None:
    client = blocking(faults.base_url(fault), api, faults.model, HANG_TIMEOUT if fault in HANGS else TIMEOUT)
    started = time.monotonic()
    try:
        outcome: object = client.system_one(state="I was charged twice.", questions={"q": INTENT})
    except Exception as error:  # what escapes is the point of the test
        outcome = error
    # Two requests at most (one retry), each bounded by the timeout, plus connection set-up.
    assert time.monotonic() - started < 2 * TIMEOUT + 2
    assert not faults.crashed
    check(outcome)


@pytest.mark.parametrize("api", ["chat_completions", "responses", "messages"])
def test_a_crashed_server_is_a_provider_error(api: str) -> None:
    with running() as server:
        client = blocking(server.base_url("crash"), api, server.model)
        with pytest.raises(ProviderError, match="could not be reached"):
            client.system_one(state="I was charged twice.", questions={"q": INTENT})


@pytest.mark.parametrize("api", ["chat_completions", "messages"])
def test_a_retry_after_of_an_hour_is_reported_at_once(faults: FaultServer, api: str) -> None:
    started = time.monotonic()
    with pytest.raises(JevperError):
        blocking(faults.base_url("429-retry-after-hour"), api, faults.model).system_one(
            state="I was charged twice.", questions={"q": INTENT}
        )
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("api", ["chat_completions", "messages"])
def test_the_async_client_bounds_a_slow_drip_by_its_timeout_as_a_whole(faults: FaultServer, api: str) -> None:
    base_url = faults.base_url("slow-drip")
    if api == "messages":
        sdk: Any = AsyncAnthropic(base_url=base_url.removesuffix("/v1"), api_key="local", max_retries=0)
    else:
        sdk = AsyncOpenAI(base_url=base_url, api_key="local", max_retries=0)
    client = AsyncSystemOneClient(sdk, model=faults.model, api=api, timeout=HANG_TIMEOUT)
    started = time.monotonic()
    with pytest.raises(JevperError, match=r"expected an answer within the [0-9.]+ s timeout"):
        asyncio.run(client.system_one(state="I was charged twice.", questions={"q": INTENT}))
    assert time.monotonic() - started < HANG_TIMEOUT + 1.5


@pytest.mark.parametrize(
    ("fault", "timeout"),
    [("slow-drip", 2.0), pytest.param("hang-after-headers", 5.0, marks=pytest.mark.slow)],
)
def test_a_system_one_timeout_raised_by_jevper_is_not_its_own_cause(
    faults: FaultServer, fault: str, timeout: float
) -> None:
    # The deadline's own ProviderError passes through the retry loop untranslated; it once left it as
    # its own __cause__, so anything walking the chain (a traceback printer, a logger) never ended.
    # The headers must arrive within the timeout for jevper's own deadline to be the one that ends the
    # read; on two busy cores (load 10) they once came after 1 s and httpx's read timeout won. A drip
    # keeps httpx's read timeout from ever firing after them, so 2 s will do; a hang after the headers
    # meets the same deadline, and its httpx timeout races it, so it needs 5 s and only repeats the proof.
    client = blocking(faults.base_url(fault), "systemone", faults.model, timeout=timeout)
    with pytest.raises(
        ProviderError, match=f"expected the whole answer within the {timeout:g} s timeout"
    ) as caught:
        client.system_one(state="I was charged twice.", questions={"q": INTENT})
    assert caught.value.__cause__ is not caught.value
    acyclic(caught.value)


@pytest.mark.parametrize("api", ["chat_completions", "systemone"])
def test_the_sdks_read_timeout_past_the_deadline_is_reported_as_the_deadline(
    faults: FaultServer, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK's read timeout starts at the headers, a moment after jevper's deadline: on a busy machine it
    # came first (the test above failed so in 4 workers on two cores). Here the deadline's watchdog never
    # cuts the socket, so the SDK's timeout always comes first, after the deadline.
    late = _deadline._Watchdog()
    monkeypatch.setattr(late, "_watch", lambda: None)
    monkeypatch.setattr(_deadline, "_WATCHDOG", late)
    client = blocking(faults.base_url("hang-after-headers"), api, faults.model, timeout=1.0)
    started = time.monotonic()
    with pytest.raises(ProviderError, match="expected the whole answer within the 1 s timeout") as caught:
        client.system_one(state="I was charged twice.", questions={"q": INTENT})
    assert time.monotonic() - started < 1.0 + 1.5
    assert caught.value.kind == "timeout"
