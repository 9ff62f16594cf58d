"""The one failure policy (jevper._failure): its table, and timeouts and unreachable servers told by type."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import httpx2
import openai
import pytest

from jevper import LabelReadoutError, ProviderError, SystemOneClient
from jevper._failure import RETRY_AFTER_CAP_S, Failure, ServerState, connection_failure, judge


def refused(status: int | None, kind: str = "other", retry_after: float | None = None) -> ProviderError:
    return ProviderError("x", status=status, server_message="x", kind=kind, retry_after=retry_after)


# rand() = 0: no jitter; the first retry's backoff is 0.5 s.
@pytest.mark.parametrize(
    ("status", "kind", "retry_after", "retry", "server", "wait"),
    [
        (None, "unreachable", None, True, "down", 0.5),
        (None, "timeout", None, False, "down", None),
        (408, "other", None, True, "down", 0.5),
        (409, "other", None, True, "busy", 0.5),
        (429, "other", None, True, "busy", 0.5),
        (429, "other", 2.0, True, "busy", 2.0),
        (429, "other", RETRY_AFTER_CAP_S + 1, True, "busy", None),
        (502, "other", None, True, "down", 0.5),
        (503, "other", None, True, "down", 0.5),
        (503, "other", 3.0, True, "busy", 3.0),
        (504, "other", None, True, "down", 0.5),
        (500, "other", None, False, "down", None),
        (500, "system_position", None, False, None, None),
        (500, "field_refused", None, False, None, None),
        (501, "not_supported", None, False, None, None),
        (501, "other", None, False, None, None),
        (400, "other", None, False, None, None),
        (404, "missing_route", None, False, None, None),
        (422, "other", None, False, None, None),
        (200, "embedded", None, False, None, None),
        (None, "missing_route", None, False, None, None),
    ],
)
def test_the_policy_says_for_each_status_and_kind_whether_to_retry_what_the_server_is_and_how_long_to_wait(
    status: int | None,
    kind: str,
    retry_after: float | None,
    retry: bool,
    server: ServerState | None,
    wait: float | None,
) -> None:
    assert judge(refused(status, kind, retry_after), 0, lambda: 0.0) == Failure(retry, server, wait)


def test_the_backoff_triples_up_to_its_cap_and_the_jitter_only_shortens_it() -> None:
    waits = [judge(refused(502), attempt, lambda: 0.0).wait for attempt in range(5)]
    assert waits == [0.5, 1.5, 4.5, 8.0, 8.0]  # min(base_delay * 3**n, max_delay), the documented backoff
    assert judge(refused(502), 0, lambda: 1.0).wait == 0.5 * 0.75


def test_an_error_raised_from_a_servers_failure_is_judged_as_that_failure() -> None:
    try:
        try:
            raise refused(503)
        except ProviderError as cause:
            raise LabelReadoutError("the corrective retry found no server") from cause
    except LabelReadoutError as error:
        assert judge(error).server == "down"


class FooTimeout(Exception):
    """A class named like a timeout that is not one."""


class Stalled(TimeoutError):
    """A timeout not named like one."""


def aiohttp_errors() -> list[Any]:
    aiohttp = pytest.importorskip("aiohttp")
    return [aiohttp.ServerTimeoutError("read"), aiohttp.ServerDisconnectedError()]


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (FooTimeout("the foo took long"), None),
        (Stalled(), "timeout"),
        (TimeoutError(), "timeout"),
        (ConnectionRefusedError(), "unreachable"),
        (socket.gaierror(-2, "Name or service not known"), "unreachable"),
        (httpx.ReadTimeout("read"), "timeout"),
        (httpx.ConnectError("refused"), "unreachable"),
        (httpx.RemoteProtocolError("closed"), "unreachable"),
        (httpx2.ReadTimeout("read"), "timeout"),
        (httpx2.ConnectError("refused"), "unreachable"),
        (openai.APITimeoutError(httpx.Request("POST", "http://h")), "timeout"),
        (openai.APIConnectionError(request=httpx.Request("POST", "http://h")), "unreachable"),
        (ValueError("x"), None),
    ],
)
def test_timeouts_and_unreachable_servers_are_told_by_the_exceptions_type_not_its_name(
    error: BaseException, said: str | None
) -> None:
    assert connection_failure(error) == said


def test_aiohttps_timeout_and_lost_connection_are_told_apart_when_it_is_installed() -> None:
    timeout, disconnected = aiohttp_errors()
    assert (connection_failure(timeout), connection_failure(disconnected)) == ("timeout", "unreachable")


class _RaisingCompletions:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def create(self, **_: Any) -> Any:
        raise self.error


class RaisingClient:
    """A client whose every create() raises ``error``: the SDKs are duck-typed."""

    def __init__(self, error: Exception) -> None:
        self.chat = type("Chat", (), {"completions": _RaisingCompletions(error)})()


def test_a_client_error_named_like_a_timeout_is_raised_as_it_is_not_reported_as_a_timeout() -> None:
    client = SystemOneClient(
        RaisingClient(FooTimeout("the foo took long")), model="m", api="chat_completions"
    )
    with pytest.raises(FooTimeout):
        client.system_one(state="x", questions={"q": {"type": "noul", "criteria": "Is it late?"}})


def test_a_lookup_failure_of_the_servers_name_is_reported_as_unreachable() -> None:
    error = socket.gaierror(-2, "Name or service not known")
    client = SystemOneClient(RaisingClient(error), model="m", api="chat_completions")
    with pytest.raises(ProviderError, match="could not be reached") as caught:
        client.system_one(state="x", questions={"q": {"type": "noul", "criteria": "Is it late?"}})
    assert caught.value.kind == "unreachable"
