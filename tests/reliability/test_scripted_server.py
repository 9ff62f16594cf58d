"""The fault server's scripted mode, the one the offline client tests drive the SDKs against: queued replies
served per path in order, the requests kept, a named fault still winning, and nothing made up."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from jevper.testing.faults import FAULT_HEADER, FaultServer, Script, running


@pytest.fixture
def scripted() -> Iterator[FaultServer]:
    with running(script=Script()) as server:
        yield server


def script_of(server: FaultServer) -> Script:
    assert server.script is not None
    return server.script


def test_each_path_answers_with_its_own_queued_replies_in_order_and_then_with_a_599(
    scripted: FaultServer,
) -> None:
    script = script_of(scripted)
    script.reply("/chat/completions", 200, {"n": 1})
    script.reply("/messages", 400, "not a JSON body")
    script.reply("/chat/completions", 503, b"[2]", "application/problem+json")
    base = scripted.base_url()
    first = httpx.post(f"{base}/chat/completions", json={"q": 1})
    refused = httpx.post(f"{base}/messages", json={"q": 2})
    second = httpx.post(f"{base}/chat/completions", json={"q": 3})
    empty = httpx.post(f"{base}/chat/completions", json={"q": 4})
    assert (first.status_code, first.json(), first.headers["content-type"]) == (
        200,
        {"n": 1},
        "application/json",
    )
    assert (refused.status_code, refused.text, refused.headers["content-type"]) == (
        400,
        "not a JSON body",
        "text/plain",
    )
    assert (second.status_code, second.content, second.headers["content-type"]) == (
        503,
        b"[2]",
        "application/problem+json",
    )
    assert (empty.status_code, empty.text) == (599, "nothing queued for /chat/completions")


def test_the_script_keeps_every_request_relative_to_v1_with_its_body_parsed_when_it_is_json(
    scripted: FaultServer,
) -> None:
    script = script_of(scripted)
    base = scripted.base_url()
    httpx.post(f"{base}/responses", json={"model": "m"}, headers={"x-trace": "t1"})
    httpx.post(f"{base}/embeddings", content=b"plain words")
    httpx.post(f"{base}/responses", content=b"")
    assert [(r.method, r.path) for r in script.requests] == [
        ("POST", "/responses"),
        ("POST", "/embeddings"),
        ("POST", "/responses"),
    ]
    assert script.requests[0].headers["x-trace"] == "t1"
    assert script.bodies() == [{"model": "m"}, "plain words", None]
    assert script.bodies("/responses") == [{"model": "m"}, None]


def test_a_queued_reply_carries_its_extra_headers_and_tells_the_client_to_close(
    scripted: FaultServer,
) -> None:
    script = script_of(scripted)
    script.reply("/messages", 429, {"error": "busy"}, headers=[("retry-after", "7")])
    answer = httpx.post(f"{scripted.base_url()}/messages", json={})
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "7"
    assert answer.headers["connection"] == "close"


def test_a_fault_named_in_the_path_or_the_header_wins_over_the_script(scripted: FaultServer) -> None:
    script = script_of(scripted)
    script.reply("/chat/completions", 200, {"queued": True})
    by_path = httpx.post(f"{scripted.base_url('html-500')}/chat/completions", json={"model": "m"})
    by_header = httpx.post(
        f"{scripted.base_url()}/chat/completions", json={"model": "m"}, headers={FAULT_HEADER: "html-404"}
    )
    assert (by_path.status_code, by_header.status_code) == (500, 404)
    assert script.requests == []
    assert len(script.replies["/chat/completions"]) == 1
    assert [e.fault for e in scripted.log] == ["html-500", "html-404"]


def test_the_model_list_still_answers_and_a_get_never_takes_a_queued_reply(scripted: FaultServer) -> None:
    script = script_of(scripted)
    script.reply("/models", 500, {"queued": True})
    models = httpx.get(f"{scripted.base_url()}/models")
    assert models.status_code == 200
    assert models.json()["data"][0]["id"] == scripted.model
    assert script.requests == []


def test_the_delay_lets_concurrent_requests_overlap_and_counts_the_most_in_flight(
    scripted: FaultServer,
) -> None:
    script = script_of(scripted)
    script.delay = 0.2
    for n in range(3):
        script.reply("/responses", 200, {"n": n})

    async def ask_three() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=scripted.base_url()) as client:
            return await asyncio.gather(*(client.post("/responses", json={}) for _ in range(3)))

    answers = asyncio.run(ask_three())
    assert sorted(a.json()["n"] for a in answers) == [0, 1, 2]
    assert (script.most_in_flight, script.in_flight) == (3, 0)


def test_a_server_without_a_script_still_answers_a_post_with_the_healthy_answer() -> None:
    with running() as server:
        answer = httpx.post(f"{server.base_url()}/chat/completions", json={"model": "m", "messages": []})
    assert answer.status_code == 200
    assert answer.json()["choices"]
    assert [e.fault for e in server.log] == ["ok"]


def test_a_stop_waits_only_while_a_connection_is_still_open() -> None:
    # Each offline client test starts and stops one: a stop used to wait 50 ms whatever was left. The
    # quickest of five stops, so that a busy machine's one slow stop does not decide.
    stops = []
    for _ in range(5):
        server = FaultServer().start()
        with httpx.Client() as kept_alive:
            assert kept_alive.get(f"{server.base_url()}/models").status_code == 200
            started = time.monotonic()
            server.stop()
            stops.append(time.monotonic() - started)
    assert min(stops) < 0.03, stops
    hanging = FaultServer().start()
    with httpx.Client(timeout=5) as client, ThreadPoolExecutor(1) as pool:
        asked = pool.submit(client.post, f"{hanging.base_url('hang-no-bytes')}/chat/completions", json={})
        time.sleep(0.1)  # the request is in, its handler hangs
        started = time.monotonic()
        hanging.stop()
        took = time.monotonic() - started
        with pytest.raises(httpx.TransportError):
            asked.result(5)
    assert took < 1.0
