"""Shadow traffic (offline, fault servers on loopback): every answered request is asked again of a
candidate upstream after the answer went out, its answers compared per question in /metrics and
GET /v1/shadow; a slow, hanging or failing shadow never touches the main answers, and its queue is
capped, what it drops counted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from jevper.serve import GatewayConfig, create_app
from jevper.serve.cli import main, parse, planned
from jevper.serve.shadow import total_variation
from jevper.testing.bodies import chat_label
from jevper.testing.faults import FaultServer, running
from jevper.testing.script import Script

KEY = "sk-gateway-shadow-7c3e"
AUTH = {"authorization": f"Bearer {KEY}"}
TOPIC = {"type": "choice", "criteria": {"billing": None, "shipping": None}}
ASKED = {"state": "I was charged twice.", "questions": {"topic": TOPIC}}


@pytest.fixture(scope="module")
def candidate() -> Iterator[FaultServer]:
    with running(model="smollm2-next") as server:
        yield server


def gateway(main_url: str, shadow_url: str, **settings: Any) -> TestClient:
    config = GatewayConfig(
        upstream=main_url,
        model="smollm2",
        api="chat_completions",
        api_keys=(KEY,),
        shadow=(shadow_url, "smollm2-next"),
        **settings,
    )
    return TestClient(create_app(config), headers=AUTH)


def settled(client: TestClient, count: int, timeout: float = 20.0) -> dict[str, Any]:
    """The shadow's report once ``count`` requests were answered by it or failed on it."""
    deadline = time.monotonic() + timeout
    while True:
        report: dict[str, Any] = client.get("/v1/shadow").json()
        done = report["requests"]["answered"] + report["requests"]["failed"]
        if done >= count or time.monotonic() > deadline:
            return report
        time.sleep(0.02)


def sample(text: str, name: str, **labels: str) -> float:
    """A sample's value in Prometheus text, 0 when absent."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_shadow_that_gives_the_same_answers_is_counted_as_agreeing_on_every_question(
    upstream: FaultServer, candidate: FaultServer
) -> None:
    with gateway(upstream.base_url(), candidate.base_url()) as client:
        answers = [client.post("/v1/systemone", json=ASKED) for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 200]
        report = settled(client, 3)
        metrics = client.get("/metrics").text
    assert report["requests"] == {
        "offered": 3,
        "answered": 3,
        "failed": 0,
        "dropped": 0,
        "waiting": 0,
        "asking": 0,
    }
    topic = report["questions"]["topic"]
    assert (topic["compared"], topic["agreed"], topic["changed"], topic["max_distance"]) == (3, 3, 0, 0.0)
    route = "/v1/systemone"
    assert (
        sample(metrics, "jevper_serve_shadow_answers_total", route=route, type="choice", agreed="true") == 3
    )
    assert sample(metrics, "jevper_serve_shadow_requests_total", route=route, outcome="answered") == 3
    # The shadow's own upstream requests are labelled "shadow", never by its URL.
    assert sample(metrics, "jevper_serve_upstream_requests_total", upstream="shadow", status="200") >= 3
    assert candidate.url not in metrics


def swapped_label() -> dict[str, Any]:
    """A Chat Completions answer that prefers B (the second option) as strongly as chat_label prefers A."""
    body = chat_label()
    entry = body["choices"][0]["logprobs"]["content"][0]
    entry["token"], entry["logprob"] = "B", -0.2
    entry["top_logprobs"] = [{"token": "B", "logprob": -0.2}, {"token": "A", "logprob": -1.9}]
    body["choices"][0]["message"]["content"] = "B"
    return body


def test_a_shadow_that_prefers_another_option_is_counted_as_changing_the_answer_with_its_distance(
    upstream: FaultServer,
) -> None:
    script = Script()
    for _ in range(20):
        script.reply("/chat/completions", 200, swapped_label())
    with (
        running(script=script, model="smollm2-next") as other,
        gateway(upstream.base_url(), other.base_url()) as client,
    ):
        given = [client.post("/v1/systemone", json=ASKED).json() for _ in range(2)]
        report = settled(client, 2)
        metrics = client.get("/metrics").text
    assert [g["answers"]["topic"]["choice"] for g in given] == ["billing", "billing"]
    topic = report["questions"]["topic"]
    assert (topic["compared"], topic["agreed"], topic["changed"]) == (2, 0, 2)
    probabilities = given[0]["answers"]["topic"]["probabilities"]
    mirrored = {"billing": probabilities["shipping"], "shipping": probabilities["billing"]}
    assert topic["mean_distance"] == pytest.approx(total_variation(probabilities, mirrored), abs=1e-5)
    assert topic["mean_distance"] > 0.5
    route = "/v1/systemone"
    assert (
        sample(metrics, "jevper_serve_shadow_answers_total", route=route, type="choice", agreed="false") == 2
    )
    assert (
        sample(metrics, "jevper_serve_shadow_answers_total", route=route, type="choice", agreed="true") == 0
    )


def test_a_failing_shadow_is_counted_and_never_gives_the_client_an_error(
    upstream: FaultServer, candidate: FaultServer
) -> None:
    with gateway(upstream.base_url(), candidate.base_url("html-500")) as client:
        statuses = [client.post("/v1/systemone", json=ASKED).status_code for _ in range(3)]
        report = settled(client, 3)
        metrics = client.get("/metrics").text
        health = client.get("/health").json()
    assert statuses == [200, 200, 200]
    assert (report["requests"]["failed"], report["requests"]["answered"]) == (3, 0)
    assert report["questions"] == {}
    assert sample(metrics, "jevper_serve_shadow_requests_total", route="/v1/systemone", outcome="failed") == 3
    assert health["upstreams"] == {"in": 1, "out": 0}  # the shadow is not one of the upstreams


def timed(client: TestClient, count: int) -> list[float]:
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        assert client.post("/v1/systemone", json=ASKED).status_code == 200
        seconds.append(time.perf_counter() - started)
    return seconds


def test_a_hanging_shadow_leaves_the_answers_latency_alone_and_a_full_queue_drops_and_counts(
    upstream: FaultServer, candidate: FaultServer
) -> None:
    without = GatewayConfig(upstream=upstream.base_url(), model="smollm2", api="chat_completions", pool=2)
    with TestClient(create_app(without)) as plain:
        timed(plain, 2)  # the surface's first answer teaches the client; not timed
        baseline = timed(plain, 10)
    hanging = candidate.base_url("hang-no-bytes")
    with gateway(upstream.base_url(), hanging, pool=2, shadow_queue=3) as client:
        timed(client, 2)
        shadowed = timed(client, 8)
        report = client.get("/v1/shadow").json()
        metrics = client.get("/metrics").text
    # Every shadow request hangs: two workers hold one each, three wait, the other five were dropped.
    assert report["requests"] == {
        "offered": 10,
        "answered": 0,
        "failed": 0,
        "dropped": 5,
        "waiting": 3,
        "asking": 2,
    }
    assert (
        sample(metrics, "jevper_serve_shadow_requests_total", route="/v1/systemone", outcome="dropped") == 5
    )
    assert sample(metrics, "jevper_serve_shadow_queue") == 3
    # An answer that waited on the shadow would wait out its hang (the 60 s timeout); no answer comes near,
    # though one may meet a stall of the loaded machine (0.42 s seen once in CI). The median is the latency.
    assert max(shadowed) < max(baseline) + 2.0, (sorted(baseline), sorted(shadowed))
    assert sorted(shadowed)[len(shadowed) // 2] < sorted(baseline)[len(baseline) // 2] + 0.05


def test_the_shadow_report_asks_for_a_key_and_names_the_shadow_without_its_secrets(
    upstream: FaultServer,
) -> None:
    with running(model="smollm2-next") as other:
        secret = f"http://user:hunter2@127.0.0.1:{other.port}/v1?key=abc123"
        with gateway(upstream.base_url(), secret) as client:
            assert client.get("/v1/shadow", headers={"authorization": "Bearer wrong"}).status_code == 401
            report = client.get("/v1/shadow").json()
    assert report["kind"] == "jevper.serve.shadow"
    assert report["shadow"] == {"url": f"http://127.0.0.1:{other.port}/v1?key=***", "model": "smollm2-next"}
    assert "hunter2" not in str(report) and "abc123" not in str(report)


def test_a_gateway_without_a_shadow_answers_its_report_route_with_a_404(upstream: FaultServer) -> None:
    config = GatewayConfig(upstream=upstream.base_url(), model="smollm2", api="chat_completions")
    with TestClient(create_app(config)) as client:
        missing = client.get("/v1/shadow")
    assert missing.status_code == 404
    assert "--shadow" in missing.json()["detail"]["message"]


def test_the_command_line_reads_the_shadow_and_its_queue_and_refuses_a_queue_below_one() -> None:
    args = parse(
        ["--upstream", "http://a:8080/v1=m", "--shadow", "http://b:8080/v1=m2", "--shadow-queue", "7"]
    )
    config = planned(args)
    assert (config.shadow, config.shadow_queue) == (("http://b:8080/v1", "m2"), 7)
    assert planned(
        parse(["--upstream", "http://a/v1", "--model", "m", "--shadow", "http://b/v1"])
    ).shadow == (
        "http://b/v1",
        "m",
    )
    assert main(["--upstream", "http://a/v1=m", "--shadow", "http://b/v1=m", "--shadow-queue", "0"]) == 2


DECIDED = {
    "model": "smollm2",
    "input": "I was charged twice for the same subscription this month.",
    "questions": [
        {"type": "predicate", "name": "refund", "instructions": "Does the customer want money back?"},
        {
            "type": "choice",
            "name": "team",
            "instructions": "Which team should answer?",
            "choices": [{"value": "billing"}, {"value": "shipping"}],
        },
        {"type": "choice", "instructions": "Is it urgent?", "choices": [{"value": True}, {"value": False}]},
        {
            "type": "score",
            "name": "urgency",
            "instructions": "How urgent is it?",
            "levels": [{"label": "low"}, {"label": "high"}],
        },
    ],
}


def test_a_decisions_request_is_shadowed_and_compared_per_question_as_a_system_one_request_is(
    upstream: FaultServer, candidate: FaultServer
) -> None:
    with gateway(upstream.base_url(), candidate.base_url()) as client:
        given = [client.post("/v1/decisions", json=DECIDED) for _ in range(2)]
        assert [g.status_code for g in given] == [200, 200]
        report = settled(client, 2)
        metrics = client.get("/metrics").text
    assert (report["requests"]["offered"], report["requests"]["answered"]) == (2, 2)
    # A question is named by its name, else by its place in the request, as the answers' debug names it.
    compared = {qid: (q["type"], q["compared"], q["agreed"]) for qid, q in report["questions"].items()}
    assert compared == {
        "refund": ("predicate", 2, 2),
        "team": ("choice", 2, 2),
        "questions[2]": ("choice", 2, 2),
        "urgency": ("score", 2, 2),
    }
    assert all(q["max_distance"] == 0.0 for q in report["questions"].values())
    route = "/v1/decisions"
    assert sample(metrics, "jevper_serve_shadow_requests_total", route=route, outcome="answered") == 2
    for kind, count in (("predicate", 2), ("choice", 4), ("score", 2)):
        assert (
            sample(metrics, "jevper_serve_shadow_answers_total", route=route, type=kind, agreed="true")
            == count
        )


def test_a_decisions_shadow_that_prefers_another_value_is_counted_as_changing_that_answer(
    upstream: FaultServer,
) -> None:
    script = Script()
    for _ in range(20):
        script.reply("/chat/completions", 200, swapped_label())
    asked = {**DECIDED, "questions": [DECIDED["questions"][1]]}
    with (
        running(script=script, model="smollm2-next") as other,
        gateway(upstream.base_url(), other.base_url()) as client,
    ):
        given = client.post("/v1/decisions", json=asked).json()
        report = settled(client, 1)
    assert given["answers"][0]["choice"] == "billing"
    team = report["questions"]["team"]
    assert (team["compared"], team["agreed"], team["changed"]) == (1, 0, 1)
    assert team["max_distance"] > 0.5
