"""The gateway offline: the Starlette app in front of the fault server (healthy or faulty upstream).

Every check happens before the upstream is asked: the key (401), the requests in flight (429), the
body's size (413), the body (422, naming the field). Only the upstream's failures are 5xx.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import subprocess
import sys
import types
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import httpx
import pytest
from _asgi_gateway import in_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from jevper import AsyncSystemOneClient
from jevper.serve import GatewayConfig, create_app
from jevper.serve.config import ConfigError
from jevper.servers.process import free_port
from jevper.testing.bodies import chat_label
from jevper.testing.faults import FaultServer, running
from jevper.testing.loopback import served_on_a_thread

KEY = "sk-gateway-test-3f9a"
STATE = "I was charged twice for the same subscription this month."
QUESTIONS: dict[str, Any] = {
    "topic": {
        "type": "choice",
        "instructions": "Which team?",
        "criteria": {"billing": None, "shipping": "parcels", "technical": "bugs"},
    },
    "refund": {"type": "noul", "instructions": "Money back?", "criteria": {"true": "yes", "false": "no"}},
    "urgency": {
        "type": "score",
        "instructions": "How urgent?",
        "criteria": ["can wait", "this week", "today"],
    },
}
VALID = {"model": "jev-latest", "state": STATE, "questions": QUESTIONS}
AUTH = {"authorization": f"Bearer {KEY}"}


def gateway(upstream_url: str, **settings: Any) -> TestClient:
    config = GatewayConfig(
        upstream=upstream_url, model="smollm2", api="chat_completions", api_keys=(KEY,), **settings
    )
    return TestClient(create_app(config), raise_server_exceptions=True)


@pytest.fixture
def app(upstream: FaultServer) -> Iterator[TestClient]:
    with gateway(upstream.base_url()) as client:
        yield client


def test_every_question_type_is_answered_in_the_apis_shape(app: TestClient) -> None:
    reply = app.post("/v1/systemone", json=VALID, headers=AUTH)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["model"] == "smollm2"
    assert list(body["answers"]) == list(QUESTIONS)
    assert {a["type"] for a in body["answers"].values()} == {"choice", "noul", "score"}
    topic = body["answers"]["topic"]
    assert set(topic["probabilities"]) == {"billing", "shipping", "technical"}
    assert sum(topic["probabilities"].values()) == pytest.approx(1.0)
    assert body["answers"]["urgency"]["legend"] == {"0": "can wait", "1": "this week", "2": "today"}
    assert set(body["usage"]) == {"input_tokens", "output_tokens"}


def test_an_api_key_is_taken_as_a_bearer_token_or_x_api_key(app: TestClient) -> None:
    assert app.post("/v1/systemone", json=VALID, headers={"x-api-key": KEY}).status_code == 200


#: A wrong key as long as the right one: a comparison of lengths alone would let it in.
SAME_LENGTH = KEY[:-1] + ("b" if KEY[-1] != "b" else "c")


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer wrong"},
        {"x-api-key": KEY[:-1]},
        {"authorization": f"Bearer {SAME_LENGTH}"},
        {"x-api-key": SAME_LENGTH},
        {"authorization": f"Bearer {KEY.upper()}"},
    ],
)
def test_a_missing_or_wrong_key_is_a_401_authentication_error(
    app: TestClient, headers: dict[str, str]
) -> None:
    reply = app.post("/v1/systemone", json=VALID, headers=headers)
    assert reply.status_code == 401
    error = reply.json()["detail"]
    assert error["error_type"] == "authentication_error"
    assert "Authorization: Bearer" in error["message"]
    assert KEY not in reply.text


def test_a_gateway_without_keys_asks_for_none(upstream: FaultServer) -> None:
    with TestClient(create_app(GatewayConfig(upstream=upstream.base_url(), model="smollm2"))) as client:
        assert client.post("/v1/systemone", json=VALID).status_code == 200


@pytest.mark.parametrize(
    ("body", "loc", "words"),
    [
        ({"state": STATE, "questions": {}}, ["body", "questions"], "1 or more questions"),
        ({"questions": QUESTIONS}, ["body", "state"], "field required"),
        (
            {"state": STATE, "questions": {"q": {"type": "rank"}}},
            ["body", "questions", "q", "type"],
            "one of",
        ),
        (
            {"state": STATE, "questions": {"q": {"type": "choice", "criteria": {}}}},
            ["body", "questions", "q", "criteria"],
            "2 to 255 options, got 0",
        ),
        (
            {
                "state": STATE,
                "questions": {"q": {"type": "choice", "criteria": {f"o{i}": None for i in range(256)}}},
            },
            ["body", "questions", "q", "criteria"],
            "got 256",
        ),
        (
            {"state": STATE, "questions": {"q": {"type": "score", "criteria": ["only"]}}},
            ["body", "questions", "q", "criteria"],
            "2 to 10 levels",
        ),
        (
            {"state": STATE, "questions": {"q": {"type": "score", "criteria": [str(i) for i in range(11)]}}},
            ["body", "questions", "q", "criteria"],
            "got 11",
        ),
        (
            {
                "state": STATE,
                "questions": {"q": {"type": "noul", "instructions": "x?", "criteria": {"maybe": ""}}},
            },
            ["body", "questions", "q", "criteria"],
            "'true', 'false' or both",
        ),
        (
            {"state": STATE, "questions": {"q": {"type": "score", "criteria": {"0": "a"}}}},
            ["body", "questions", "q", "criteria"],
            "a list",
        ),
        ({"state": STATE, "model": 7, "questions": QUESTIONS}, ["body", "model"], "a string"),
        ({"state": "x\udcff", "questions": QUESTIONS}, ["body"], "state"),
    ],
)
def test_an_invalid_request_is_a_422_whose_detail_names_the_field(
    app: TestClient, body: dict[str, Any], loc: list[Any], words: str
) -> None:
    raw = json.dumps(body).encode()  # a lone surrogate travels as a \\udcff escape
    reply = app.post("/v1/systemone", content=raw, headers={**AUTH, "content-type": "application/json"})
    assert reply.status_code == 422, reply.text
    detail = reply.json()["detail"]
    assert any(d["loc"] == loc and words in d["msg"] for d in detail), detail


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b'"a string"', b""])
def test_a_body_that_is_not_a_json_object_is_a_422(app: TestClient, raw: bytes) -> None:
    reply = app.post("/v1/systemone", content=raw, headers=AUTH)
    assert reply.status_code == 422
    assert reply.json()["detail"][0]["loc"] == ["body"]


def test_a_body_over_the_cap_is_a_413_naming_the_cap_whether_declared_or_streamed(
    upstream: FaultServer,
) -> None:
    with gateway(upstream.base_url(), max_body_bytes=1000) as client:
        declared = client.post("/v1/systemone", content=b"x" * 5000, headers=AUTH)
        streamed = client.post("/v1/systemone", content=iter([b"x" * 600, b"x" * 600]), headers=AUTH)
    for reply in (declared, streamed):
        assert reply.status_code == 413
        assert "at most 1000 bytes" in reply.json()["detail"]["message"]
        assert "--max-body-bytes" in reply.json()["detail"]["message"]


def test_the_requests_past_the_in_flight_limit_get_429_with_retry_after() -> None:
    # An upstream that holds each answer 2 s: the two requests let in are still in flight when the other
    # three arrive, a moment later (a slow drip held them 6 s).
    async def burst(held: FaultServer) -> list[httpx.Response]:
        config = GatewayConfig(
            upstream=held.base_url(), model="smollm2", api="chat_completions", max_in_flight=2
        )
        async with in_process(create_app(config), timeout=30) as client:
            one = {"state": STATE, "questions": {"topic": QUESTIONS["topic"]}}
            return list(await asyncio.gather(*(client.post("/v1/systemone", json=one) for _ in range(5))))

    with FaultServer(model="smollm2", delay=2.0) as held:
        replies = asyncio.run(burst(held))
    statuses = sorted(r.status_code for r in replies)
    assert statuses.count(429) == 3, statuses
    busy = next(r for r in replies if r.status_code == 429)
    assert busy.headers["retry-after"] == "1"
    assert busy.json()["detail"]["error_type"] == "rate_limit_error"


@pytest.mark.parametrize("fault", ["502-retry-after", "html-500", "connection-reset", "crash"])
def test_an_upstream_failure_is_a_502_that_says_so(fault: str) -> None:
    with running(model="smollm2") as failing, gateway(failing.base_url(fault), timeout=5) as client:
        reply = client.post("/v1/systemone", json=VALID, headers=AUTH)
    assert reply.status_code == 502, reply.text
    assert reply.json()["detail"]["error_type"] == "upstream_error"


def test_an_upstream_that_hangs_is_a_504_within_the_timeout(upstream: FaultServer) -> None:
    with gateway(upstream.base_url("hang-no-bytes"), timeout=1.0) as client:
        reply = client.post(
            "/v1/systemone", json={"state": STATE, "questions": {"t": QUESTIONS["topic"]}}, headers=AUTH
        )
    assert reply.status_code == 504
    assert "--timeout" in reply.json()["detail"]["message"]


def test_images_are_refused_as_not_supported_not_as_an_error_of_the_server(app: TestClient) -> None:
    reply = app.post("/v1/systemone", json={**VALID, "images": ["data:image/png;base64,AAAA"]}, headers=AUTH)
    assert reply.status_code == 501
    assert reply.json()["detail"]["error_type"] == "not_supported_error"


def test_the_model_list_marks_the_served_model_as_a_decision_model_in_both_shapes(app: TestClient) -> None:
    body = app.get("/v1/models", headers=AUTH).json()
    assert body["data"][0]["id"] == "smollm2"
    assert body["data"][0]["architecture"]["output_modalities"] == ["decisions"]
    assert body["models"][0]["name"] == "smollm2"
    assert app.get("/v1/models").status_code == 401


def test_health_answers_without_a_key_and_an_unknown_route_is_a_json_404(app: TestClient) -> None:
    assert app.get("/health").json()["status"] == "ok"
    missing = app.post("/v1/chat/completions", json={}, headers=AUTH)
    assert missing.status_code == 404 and missing.json()["detail"]["error_type"] == "not_found_error"
    wrong = app.get("/v1/systemone", headers=AUTH)
    assert wrong.status_code == 405


def test_nothing_of_a_key_reaches_the_log(app: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        app.post("/v1/systemone", json=VALID, headers=AUTH)
        app.post("/v1/systemone", json=VALID, headers={"authorization": "Bearer sk-wrong-key-in-log"})
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "POST /v1/systemone 200" in logged
    assert KEY not in logged and "sk-wrong-key-in-log" not in logged


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(
        JSON,
        st.fixed_dictionaries({"state": JSON, "questions": JSON}),
        st.fixed_dictionaries(
            {
                "state": st.text(max_size=20),
                "questions": st.dictionaries(st.text(max_size=4), JSON, max_size=3),
            }
        ),
    )
)
def test_a_bad_request_never_gets_a_5xx(app: TestClient, body: Any) -> None:
    reply = app.post("/v1/systemone", content=json.dumps(body).encode(), headers=AUTH)
    assert reply.status_code < 500 or reply.status_code == 501, (body, reply.text)
    assert reply.status_code in (200, 422, 501), (body, reply.status_code, reply.text)


def test_the_extra_body_reaches_every_upstream_request_as_given(upstream: FaultServer) -> None:
    from jevper.testing.script import Script

    script = Script()
    with running(script=script, model="smollm2") as scripted:
        script.reply("/chat/completions", 200, chat_label())
        switch = {"chat_template_kwargs": {"enable_thinking": False}}
        with gateway(scripted.base_url(), method="logprobs", extra_body=switch) as client:
            one = {"state": STATE, "questions": {"q": {"type": "noul", "instructions": "Angry?"}}}
            assert client.post("/v1/systemone", json=one, headers=AUTH).status_code == 200
    assert script.bodies("/chat/completions")[0]["chat_template_kwargs"] == {"enable_thinking": False}


def test_the_command_line_takes_an_extra_body_object_and_refuses_anything_else(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from jevper.serve.cli import parser

    assert parser().parse_args(["--extra-body", '{"a": 1}']).extra_body == {"a": 1}
    with pytest.raises(SystemExit):
        parser().parse_args(["--extra-body", "[1]"])
    assert "expected a JSON object, got list" in capsys.readouterr().err


def test_messages_with_a_logprob_method_is_refused_at_start_up_naming_both_flags(
    upstream: FaultServer,
) -> None:
    # A subprocess, so a gateway that starts serving instead of refusing fails by its time-out.
    command = [sys.executable, "-m", "jevper.serve", "--upstream", upstream.base_url(), "--model", "smollm2"]
    command += ["--api", "messages", "--method", "logprobs", "--port", str(free_port())]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "--api messages --method logprobs: expected a method the Messages API can answer" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--concurrency", "0"], "--concurrency: expected a whole number of at least 1, got 0"),
        (["--limit-concurrency", "0"], "--limit-concurrency: expected a whole number of at least 1, got 0"),
        (["--max-body-bytes", "-1"], "--max-body-bytes: expected a whole number of at least 1, got -1"),
        (["--timeout", "0"], "--timeout: expected a positive number of seconds, got 0.0"),
        (["--extra-body", '{"stream": true}'], "--extra-body (extra_body): expected stream to be absent"),
        (["--api", "messages", "--method", "grammar"], "--api messages --method grammar: expected"),
    ],
)
def test_settings_that_cannot_work_are_refused_before_anything_starts(flags: list[str], named: str) -> None:
    from jevper.serve.cli import parser, planned

    # With --spawn the check comes before llama.cpp is started.
    for behind in (["--spawn"], ["--upstream", "http://127.0.0.1:9/v1", "--model", "m"]):
        with pytest.raises(ConfigError) as refused:
            planned(parser().parse_args([*behind, *flags]))
        assert named in str(refused.value)


def test_a_config_that_cannot_work_cannot_be_made(upstream: FaultServer) -> None:
    with pytest.raises(ConfigError, match=r"^--api messages --method logprobs: "):
        GatewayConfig(upstream=upstream.base_url(), model="smollm2", api="messages", method="logprobs")
    config = GatewayConfig(upstream=upstream.base_url(), model="smollm2", extra_body={"stream": True})
    with pytest.raises(ConfigError, match=r"^--extra-body \(extra_body\): expected stream"):
        create_app(config)


def test_an_upstream_key_that_cannot_travel_as_a_header_is_refused_at_start_up_never_quoted(
    upstream: FaultServer,
) -> None:
    config = GatewayConfig(upstream=upstream.base_url(), model="smollm2", upstream_api_key="sk-secret\n")
    refused = r"^--upstream-api-key: .*expected an api_key of printable ASCII"
    with pytest.raises(ConfigError, match=refused) as no:
        create_app(config)
    assert "sk-secret" not in str(no.value)


class _FailingCompletions:
    """A Chat Completions resource that fails the way no jevper error does: a bug, as far as the gateway
    can tell."""

    async def create(self, **_: Any) -> Any:
        raise RuntimeError("an error nobody anticipated")


class _FailingSDK:
    def __init__(self) -> None:
        self.chat = types.SimpleNamespace(completions=_FailingCompletions())


def test_an_unexpected_error_is_a_json_500_naming_the_request_it_was_logged_under(
    upstream: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    config = GatewayConfig(upstream=upstream.base_url(), model="smollm2", api="chat_completions")
    client = AsyncSystemOneClient(_FailingSDK(), model="smollm2", api="chat_completions")
    app = TestClient(create_app(config, client), raise_server_exceptions=True)
    with caplog.at_level(logging.INFO, logger="jevper.serve"), app:
        reply = app.post("/v1/systemone", json=VALID)
        assert app.get("/health").json()["in_flight"] == 0
    assert reply.status_code == 500
    assert reply.headers["content-type"] == "application/json"
    error = reply.json()["detail"]
    assert error["error_type"] == "internal_error"
    assert error["request_id"] == reply.headers["x-request-id"]
    assert f"request {error['request_id']}" in error["message"]
    logged = [r for r in caplog.records if error["request_id"] in r.getMessage()]
    assert len(logged) == 1
    assert logged[0].exc_info is not None and "an error nobody anticipated" in str(logged[0].exc_info[1])
    assert "POST /v1/systemone 500" in caplog.text


@pytest.mark.parametrize(
    "question",
    [
        {"type": "choice", "criteria": {"only": None}},
        {"type": "choice", "criteria": {"a": 3, "b": None}},
        {"type": "score", "criteria": ["low", ""]},
        {"type": "noul", "criteria": {"true": "a", "maybe": "b"}},
        {"type": "noul", "criteria": "one text"},
        {"type": "noul", "instructions": [], "criteria": None},
        {"type": "rank"},
    ],
)
def test_the_gateways_422_is_the_question_rules_own_refusal_where_it_sits(
    app: TestClient, question: dict[str, Any]
) -> None:
    from jevper import InvalidQuestionError
    from jevper.questions import as_question

    with pytest.raises(InvalidQuestionError) as refused:
        as_question("q", question, api_only=True)
    reply = app.post("/v1/systemone", json={"state": STATE, "questions": {"q": question}}, headers=AUTH)
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"] == [
        {"loc": ["body", *refused.value.loc], "msg": refused.value.problem, "type": "value_error"}
    ]


@pytest.mark.parametrize("criteria", [{"true": "asks for money back"}, {"false": "asks for nothing"}, None])
def test_a_noul_without_instructions_and_with_one_sided_or_no_criteria_is_answered(
    app: TestClient, criteria: Any
) -> None:
    question: dict[str, Any] = {"type": "noul"}
    if criteria is not None:
        question["criteria"] = criteria
    reply = app.post("/v1/systemone", json={"state": STATE, "questions": {"q": question}}, headers=AUTH)
    assert reply.status_code == 200, reply.text
    assert reply.json()["answers"]["q"]["type"] == "noul"


class _Proxy(http.server.BaseHTTPRequestHandler):
    """A loopback HTTP proxy that answers every request itself with a label answer, noting its target."""

    targets: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.targets.append(self.path)
        body = json.dumps(chat_label()).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    _Proxy.targets = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    with served_on_a_thread(server):
        yield f"http://127.0.0.1:{server.server_address[1]}"


def test_the_upstream_is_reached_through_the_environments_proxy(
    proxy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy)
    one = {"state": STATE, "questions": {"q": {"type": "noul", "instructions": "Angry?"}}}
    # A host only the proxy knows: asked directly, it cannot be resolved.
    with gateway("http://upstream.invalid/v1", method="logprobs") as client:
        reply = client.post("/v1/systemone", json=one, headers=AUTH)
    assert reply.status_code == 200, reply.text
    assert _Proxy.targets == ["http://upstream.invalid/v1/chat/completions"]


def test_an_upstream_named_in_no_proxy_is_reached_directly(
    proxy: str, upstream: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with gateway(upstream.base_url()) as client:
        reply = client.post("/v1/systemone", json=VALID, headers=AUTH)
    assert reply.status_code == 200, reply.text
    assert _Proxy.targets == []


async def _slowly(first: bytes, pause: float, rest: bytes) -> AsyncIterator[bytes]:
    yield first
    await asyncio.sleep(pause)
    yield rest


def _post_slowly(config: GatewayConfig, pause: float, fast: int = 0) -> list[httpx.Response]:
    """A body sent in two parts ``pause`` s apart, and ``fast`` ordinary requests sent meanwhile."""
    raw = json.dumps({"state": STATE, "questions": {"t": QUESTIONS["topic"]}}).encode()

    async def both() -> list[httpx.Response]:
        async with in_process(create_app(config), timeout=30) as client:
            slow = asyncio.create_task(
                client.post("/v1/systemone", content=_slowly(raw[:10], pause, raw[10:]), headers=AUTH)
            )
            await asyncio.sleep(0.2)  # the slow body has begun
            others = [await client.post("/v1/systemone", content=raw, headers=AUTH) for _ in range(fast)]
            return [await slow, *others]

    return asyncio.run(both())


def test_a_body_that_does_not_arrive_within_the_body_timeout_is_a_408(upstream: FaultServer) -> None:
    config = GatewayConfig(upstream=upstream.base_url(), model="smollm2", api_keys=(KEY,), body_timeout=0.5)
    [reply] = _post_slowly(config, pause=3.0)
    assert reply.status_code == 408, reply.text
    error = reply.json()["detail"]
    assert error["error_type"] == "request_timeout"
    assert "within 0.5 s" in error["message"] and "--body-timeout" in error["message"]


def test_a_request_counts_as_in_flight_only_once_its_body_has_been_read(upstream: FaultServer) -> None:
    config = GatewayConfig(upstream=upstream.base_url(), model="smollm2", api_keys=(KEY,), max_in_flight=1)
    slow, *fast = _post_slowly(config, pause=1.5, fast=2)
    assert [r.status_code for r in fast] == [200, 200], [r.text for r in fast]
    assert slow.status_code == 200, slow.text


@pytest.mark.parametrize("depth", [150, 900, 100_000])
@pytest.mark.parametrize("where", ["state", "criteria"])
def test_a_body_nested_too_deep_is_a_400_that_says_so_never_a_500(
    app: TestClient, depth: int, where: str
) -> None:
    deep = "[" * depth + "]" * depth
    criteria = f'{{"a": {deep}, "b": null}}' if where == "criteria" else '{"a": null, "b": null}'
    state = deep if where == "state" else '"x"'
    raw = f'{{"state": {state}, "questions": {{"q": {{"type": "choice", "criteria": {criteria}}}}}}}'
    reply = app.post("/v1/systemone", content=raw.encode(), headers=AUTH)
    assert reply.status_code == 400, reply.text
    error = reply.json()["detail"]
    assert error["error_type"] == "invalid_request_error"
    assert "nested at most 64 deep" in error["message"]


def test_control_characters_of_a_path_reach_the_log_escaped(
    app: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="jevper.serve"):
        reply = app.get("/v1/x%0a2026-12-03 INFO jevper.serve [-] POST /v1/systemone 200%0d%1b[2J%7f")
    assert reply.status_code == 404
    [line] = [r.getMessage() for r in caplog.records if "/v1/x" in r.getMessage()]
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in line), repr(line)
    assert "/v1/x\\n2026-12-03 INFO" in line and "200\\r\\x1b[2J\\x7f 404" in line


def test_a_choice_wider_than_the_labels_gets_the_same_distribution_from_the_gateway_and_the_clients(
    app: TestClient, upstream: FaultServer
) -> None:
    from openai import AsyncOpenAI, OpenAI

    from jevper import Choice, SystemOneClient

    criteria = {f"queue {i:03d}": f"tickets routed to queue {i}" for i in range(60)}
    body = {"state": STATE, "questions": {"q": {"type": "choice", "criteria": criteria}}}
    reply = app.post("/v1/systemone", json=body, headers=AUTH)
    assert reply.status_code == 200, reply.text
    through_gateway = reply.json()["answers"]["q"]
    question = {"q": Choice(criteria=criteria)}
    options: dict[str, Any] = {"model": "smollm2", "api": "chat_completions"}
    with OpenAI(base_url=upstream.base_url(), api_key="none") as sdk:
        blocking = SystemOneClient(sdk, **options).system_one(state=STATE, questions=question).answers["q"]

    async def awaited() -> Any:
        async with AsyncOpenAI(base_url=upstream.base_url(), api_key="none") as sdk:
            client = AsyncSystemOneClient(sdk, **options)
            return (await client.system_one(state=STATE, questions=question)).answers["q"]

    for answer in (blocking, asyncio.run(awaited())):
        assert answer.choice == through_gateway["choice"]
        assert answer.probabilities == pytest.approx(through_gateway["probabilities"], rel=1e-9)
        assert answer.confidence == pytest.approx(through_gateway["confidence"])
    assert len(set(through_gateway["probabilities"].values())) > 2  # the model's numbers, not an even split


def test_a_port_already_taken_is_refused_at_once_naming_it_before_any_upstream_is_started(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import socket

    from jevper.serve.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        argv = ["--upstream", "http://127.0.0.1:9/v1", "--model", "m", "--port", str(port)]
        assert main(argv) == 2
    said = capsys.readouterr().err
    assert f"python -m jevper.serve: --host 127.0.0.1 --port {port}: " in said and "in use" in said
