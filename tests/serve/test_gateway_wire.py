"""The gateway offline, on a real socket (Uvicorn in a thread) in front of the fault server: requests as
the official SDK sends them (zstd bodies, multipart assets), wide choice questions, request ids, metrics.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
import uvicorn
from backports import zstd
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient
from typesafe_sdk import (
    Choice,
    Image,
    Noul,
    RetryPolicy,
    Score,
    TypeSafeClient,
    TypeSafeUnprocessableEntityError,
)

from jevper.serve import GatewayConfig, create_app
from jevper.serve.observe import RequestIdFilter
from jevper.servers.process import free_port
from jevper.testing.faults import FaultServer

KEY = "sk-gateway-wire-81c2"
AUTH = {"authorization": f"Bearer {KEY}"}
LONG_STATE = "I was charged twice for the same subscription this month. " * 40  # over 1 KiB: compressed
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108020000009077"
    "53de0000000c4944415478da63f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)


def config(upstream: FaultServer, **settings: Any) -> GatewayConfig:
    return GatewayConfig(
        upstream=upstream.base_url(), model="smollm2", api="chat_completions", api_keys=(KEY,), **settings
    )


@contextlib.contextmanager
def served(settings: GatewayConfig) -> Iterator[str]:
    """The gateway on a free loopback port, in a thread of this process; its root URL."""
    port = free_port()
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the gateway did not start within 20 s"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def gateway(upstream: FaultServer) -> Iterator[str]:
    with served(config(upstream)) as root:
        yield root


def sdk(root: str, sent: list[httpx2.Request], **settings: Any) -> TypeSafeClient:
    """The official SDK, with its zstd support installed, recording what it sends."""
    http = httpx2.Client(event_hooks={"request": [sent.append]}, timeout=60)
    return TypeSafeClient(base_url=root, api_key=KEY, http_client=http, **settings)


def test_the_sdk_sends_a_long_state_compressed_with_zstd_and_gets_its_answers(gateway: str) -> None:
    sent: list[httpx2.Request] = []
    response = sdk(gateway, sent).system_one(
        LONG_STATE,
        {
            "topic": Choice(instructions="Which team?", criteria={"billing": None, "shipping": "parcels"}),
            "refund": Noul(instructions="Money back?"),
            "urgency": Score(instructions="How urgent?", criteria=["can wait", "this week", "today"]),
        },
    )
    assert sent[-1].headers["content-encoding"] == "zstd"  # what the SDK does, checked, not assumed
    assert set(response.answers) == {"topic", "refund", "urgency"}
    assert sum(response.answers["topic"].probabilities.values()) == pytest.approx(1.0)


def test_the_sdks_image_assets_get_the_apis_501_for_a_model_that_reads_none(gateway: str) -> None:
    sent: list[httpx2.Request] = []
    # The SDK retries every 5xx twice by default, after a backoff: once is the proof.
    client = sdk(gateway, sent, retry=RetryPolicy(max_retries=0))
    with pytest.raises(Exception) as refused:
        client.system_one(
            ["What is in the photo?", {"asset": "photo"}],
            {"q": Noul(instructions="Is it a cat?")},
            assets={"photo": Image(PNG)},
        )
    assert len(sent) == 1 and sent[0].headers["content-type"].startswith("multipart/form-data")
    assert getattr(refused.value, "status", None) == 501, refused.value
    assert "reads no images" in str(refused.value)


def raw_post(root: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(f"{root}/v1/systemone", content=body, headers={**AUTH, **headers}, timeout=60)


ONE = {"state": "charged twice", "questions": {"q": {"type": "noul", "instructions": "Angry?"}}}


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [
        ("zstd", zstd.compress),
        ("gzip", lambda b: zlib.compress(b, wbits=31)),
        ("deflate", zlib.compress),
        ("identity", lambda b: b),
    ],
)
def test_each_encoding_the_sdk_or_a_proxy_may_send_is_decoded(gateway: str, encoding: str, pack: Any) -> None:
    reply = raw_post(gateway, pack(json.dumps(ONE).encode()), **{"content-encoding": encoding})
    assert reply.status_code == 200, reply.text
    assert 0 <= reply.json()["answers"]["q"]["noul"] <= 1


def test_the_size_cap_holds_after_decoding_a_small_zstd_bomb(upstream: FaultServer) -> None:
    bomb = zstd.compress(json.dumps({**ONE, "pad": "x" * 2_000_000}).encode())
    assert len(bomb) < 1000
    with served(config(upstream, max_body_bytes=100_000)) as root:
        reply = raw_post(root, bomb, **{"content-encoding": "zstd"})
    assert reply.status_code == 413, reply.text
    assert "decoded request body of at most 100000 bytes" in reply.json()["detail"]["message"]


@pytest.mark.parametrize(
    ("body", "encoding", "status", "words"),
    [
        (zstd.compress(json.dumps(ONE).encode())[:-6], "zstd", 422, "does not decode"),
        (b"not zstd at all", "zstd", 422, "does not decode"),
        (json.dumps(ONE).encode(), "br", 415, "Content-Encoding"),
    ],
)
def test_a_body_that_does_not_decode_is_a_4xx_that_says_why(
    gateway: str, body: bytes, encoding: str, status: int, words: str
) -> None:
    reply = raw_post(gateway, body, **{"content-encoding": encoding})
    assert reply.status_code == status, reply.text
    assert words in reply.text


def test_a_multipart_body_without_assets_is_answered_and_one_without_its_request_part_is_a_422(
    gateway: str,
) -> None:
    request = json.dumps(ONE).encode()
    files = {"request": ("request", request, "application/json")}
    assert httpx.post(f"{gateway}/v1/systemone", files=files, headers=AUTH, timeout=60).status_code == 200
    other = {"asset-0": ("asset-0", PNG, "image/png")}
    reply = httpx.post(f"{gateway}/v1/systemone", files=other, headers=AUTH, timeout=60)
    assert reply.status_code == 422 and "named 'request'" in reply.text


def test_a_json_assets_field_is_a_501_too(gateway: str) -> None:
    body = {**ONE, "assets": {"photo": {"type": "image", "data": "AAAA"}}}
    reply = raw_post(gateway, json.dumps(body).encode(), **{"content-type": "application/json"})
    assert reply.status_code == 501
    assert reply.json()["detail"]["error_type"] == "not_supported_error"


def test_an_sdk_validation_error_reads_the_422s_detail_list(gateway: str) -> None:
    with pytest.raises(TypeSafeUnprocessableEntityError):
        sdk(gateway, []).system_one("x", {"q": {"type": "rank"}})  # type: ignore[dict-item]


def test_a_choice_of_255_options_is_answered_in_rounds_with_a_distribution_over_all_of_them(
    gateway: str,
) -> None:
    options = {f"queue {i:03d}": f"tickets routed to queue {i}" for i in range(255)}
    body = {"state": "charged twice", "questions": {"q": {"type": "choice", "criteria": options}}}
    reply = raw_post(gateway, json.dumps(body).encode())
    assert reply.status_code == 200, reply.text
    answer = reply.json()["answers"]["q"]
    assert list(answer["probabilities"]) == list(options)
    assert sum(answer["probabilities"].values()) == pytest.approx(1.0)
    assert answer["choice"] == max(answer["probabilities"], key=answer["probabilities"].get)
    assert len(set(answer["probabilities"].values())) > 2  # a distribution, not one-hot or uniform


def test_a_request_id_is_taken_when_usable_made_otherwise_and_returned_either_way(gateway: str) -> None:
    given = httpx.get(f"{gateway}/health", headers={"x-request-id": "client-7f3a"})
    assert given.headers["x-request-id"] == "client-7f3a"
    made = httpx.get(f"{gateway}/health")
    forged = httpx.get(f"{gateway}/health", headers={"x-request-id": "a b\tforged log line"})
    assert len(made.headers["x-request-id"]) == 32
    assert forged.headers["x-request-id"] not in ("a b\tforged log line", made.headers["x-request-id"])
    refused = raw_post(gateway, b"{}", **{"authorization": "Bearer wrong", "x-request-id": "r-401"})
    assert refused.status_code == 401 and refused.headers["x-request-id"] == "r-401"


def test_every_log_line_written_while_a_request_is_answered_names_its_id(
    upstream: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.handler.addFilter(RequestIdFilter())
    with caplog.at_level(logging.DEBUG), TestClient(create_app(config(upstream))) as client:
        client.post("/v1/systemone", json=ONE, headers={**AUTH, "x-request-id": "trace-1"})
    during = [r for r in caplog.records if getattr(r, "request_id", "-") != "-"]
    assert {r.request_id for r in during} == {"trace-1"}  # type: ignore[attr-defined]
    assert {r.name for r in during} >= {"jevper.serve", "jevper.serve.upstream"}
    sent = [r.getMessage() for r in during if r.name == "jevper.serve.upstream"]
    pattern = re.compile(re.escape(f"POST {upstream.base_url()}/") + r"[a-z/_]+: 200 in \d+ ms")
    assert sent and all(pattern.fullmatch(line) for line in sent), sent


def samples(root: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{root}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_metrics_counters_agree_with_the_requests_sent(upstream: FaultServer) -> None:
    with served(config(upstream)) as root:
        three = {
            "state": "charged twice",
            "questions": {
                "a": {"type": "noul", "instructions": "Angry?"},
                "b": {"type": "choice", "criteria": {"x": None, "y": None}},
                "c": {"type": "score", "criteria": ["low", "high"]},
            },
        }
        for _ in range(4):
            assert raw_post(root, json.dumps(three).encode()).status_code == 200
        assert raw_post(root, b"not json").status_code == 422
        assert raw_post(root, b"{}", authorization="Bearer wrong").status_code == 401
        seen = samples(root)
    route = ("route", "/v1/systemone")
    assert seen[("jevper_serve_requests_total", (route, ("status", "200")))] == 4
    assert seen[("jevper_serve_requests_total", (route, ("status", "422")))] == 1
    assert seen[("jevper_serve_requests_total", (route, ("status", "401")))] == 1
    assert seen[("jevper_serve_request_seconds_count", (route,))] == 6
    assert seen[("jevper_serve_in_flight", ())] == 0
    by_type = {
        dict(labels)["type"]: value
        for (name, labels), value in seen.items()
        if name == "jevper_serve_questions_total"
    }
    assert by_type == {"noul": 4, "choice": 4, "score": 4}
    up = ("upstream", "0")  # the upstream's position, never its URL
    assert seen[("jevper_serve_upstream_requests_total", (("status", "200"), up))] == 12
    assert seen[("jevper_serve_upstream_seconds_count", (up,))] == 12


def test_a_wide_choice_with_long_descriptions_is_asked_in_smaller_groups_and_still_sums_to_one(
    gateway: str,
) -> None:
    options = {f"option {i}": "a long description of what this option covers. " * 30 for i in range(27)}
    body = {"state": "charged twice", "questions": {"q": {"type": "choice", "criteria": options}}}
    reply = raw_post(gateway, json.dumps(body).encode())
    assert reply.status_code == 200, reply.text
    probabilities = reply.json()["answers"]["q"]["probabilities"]
    assert list(probabilities) == list(options)
    assert sum(probabilities.values()) == pytest.approx(1.0)


def test_a_gzip_body_of_several_members_is_read_whole(gateway: str) -> None:
    # RFC 1952: a gzip file is a series of members, and gzip -c a b > ab sends one as such.
    raw = json.dumps(ONE).encode()
    members = zlib.compress(raw[:10], wbits=31) + zlib.compress(raw[10:], wbits=31)
    reply = raw_post(gateway, members, **{"content-encoding": "gzip"})
    assert reply.status_code == 200, reply.text
    assert 0 <= reply.json()["answers"]["q"]["noul"] <= 1


def test_the_size_cap_holds_over_every_gzip_member_together() -> None:
    from jevper.serve.body import decode
    from jevper.serve.errors import Refusal
    from jevper.serve.validation import Invalid

    member = zlib.compress(b"x" * 600, wbits=31)
    assert decode(member * 3, "gzip", 1800) == b"x" * 1800
    with pytest.raises(Refusal) as refused:
        decode(member * 3, "gzip", 1799)
    assert refused.value.status == 413
    with pytest.raises(Invalid):  # a second member cut short
        decode(member + member[:-6], "gzip", 10_000)
