"""``--escalate-to URL=MODEL --escalate-below P`` on the gateway, offline in front of two scripted upstreams
that answer differently: an unsure question is asked again of the second upstream and its answer given,
with each question's route in a header; a second upstream that fails leaves the first answer with the
failure named; a bad flag is exit 2 naming what was expected, ``auto`` without a calibration too."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from jevper.serve import GatewayConfig, create_app
from jevper.serve.app import ESCALATION_HEADER
from jevper.serve.cli import main
from jevper.testing.bodies import chat_label
from jevper.testing.faults import FaultServer, running
from jevper.testing.script import Script

TOPIC = {"type": "choice", "criteria": {"billing": None, "other": None}}
ASKED = {"state": "I was charged twice.", "questions": {"topic": TOPIC}}


def label(a: float) -> dict[str, Any]:
    """A Chat Completions answer whose label A (billing) has probability ``a`` and B (other) the rest."""
    body = chat_label()
    top = [{"token": "A", "logprob": math.log(a)}, {"token": "B", "logprob": math.log(1 - a)}]
    first = top[0] if a >= 0.5 else top[1]
    body["choices"][0]["message"]["content"] = first["token"]
    body["choices"][0]["logprobs"] = {"content": [{**first, "top_logprobs": top}]}
    return body


@pytest.fixture
def upstreams() -> Iterator[tuple[Script, Script, FaultServer, FaultServer]]:
    first, second = Script(), Script()
    with running(script=first, model="small") as a, running(script=second, model="large") as b:
        yield first, second, a, b


def gateway(a: FaultServer, b: FaultServer, below: float) -> TestClient:
    config = GatewayConfig(
        upstream=a.base_url(),
        model="small",
        api="chat_completions",
        method="logprobs",
        escalate_to=(b.base_url(), "large"),
        escalate_below=below,
    )
    return TestClient(create_app(config))


def test_the_gateway_asks_an_unsure_question_again_of_the_second_upstream_and_says_so(
    upstreams: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = upstreams
    first.reply("/chat/completions", 200, label(0.6))
    second.reply("/chat/completions", 200, label(0.1))
    first.reply("/chat/completions", 200, label(0.9))
    with gateway(a, b, 0.8) as app:
        unsure = app.post("/v1/systemone", json=ASKED)
        sure = app.post("/v1/systemone", json=ASKED)
    assert unsure.status_code == 200, unsure.text
    answer = unsure.json()["answers"]["topic"]
    assert answer["choice"] == "other"
    assert answer["probabilities"]["other"] == pytest.approx(0.9)
    assert unsure.headers[ESCALATION_HEADER] == "topic=second; confidence=0.6; below=0.8"
    assert sure.json()["answers"]["topic"]["choice"] == "billing"
    assert sure.headers[ESCALATION_HEADER] == "topic=first; confidence=0.9; below=0.8"
    assert (len(first.requests), len(second.requests)) == (2, 1)


def test_a_second_upstream_that_fails_leaves_the_first_answer_and_names_the_failure(
    upstreams: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = upstreams
    first.reply("/chat/completions", 200, label(0.7))
    second.reply("/chat/completions", 400, {"error": {"message": "model large is not loaded"}})
    with gateway(a, b, 0.8) as app:
        reply = app.post("/v1/systemone", json=ASKED)
    assert reply.status_code == 200, reply.text
    assert reply.json()["answers"]["topic"]["choice"] == "billing"
    assert reply.headers[ESCALATION_HEADER] == (
        "topic=first; confidence=0.7; below=0.8; failed=ProviderError"
    )


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--escalate-to", "http://127.0.0.1:9/v1", "--escalate-below", "0.8"], "expected URL=MODEL"),
        (
            ["--escalate-to", "http://127.0.0.1:9/v1=large", "--escalate-below", "0"],
            "expected a top probability",
        ),
        (["--escalate-below", "auto"], "--escalate-to URL=MODEL: expected with --escalate-below"),
    ],
)
def test_a_bad_escalation_flag_exits_2_naming_what_was_expected(
    flags: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["--upstream", "http://127.0.0.1:9/v1=small", *flags])
    assert refused.value.code == 2
    assert expected in capsys.readouterr().err


def test_escalate_below_auto_without_a_calibration_exits_2_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(
        [
            "--upstream",
            "http://127.0.0.1:9/v1=small",
            "--escalate-to",
            "http://127.0.0.1:9/v1=large",
            "--escalate-below",
            "auto",
        ]
    )
    assert status == 2
    assert "expected a calibration" in capsys.readouterr().err


def escalated_kept_failed(first: Script, second: Script) -> None:
    """Three calls' replies: one escalated (0.6 first, the second server's answer), one kept (0.9), one
    whose escalation fails (0.7 first, the second server has not loaded its model)."""
    first.reply("/chat/completions", 200, label(0.6))
    second.reply("/chat/completions", 200, label(0.1))
    first.reply("/chat/completions", 200, label(0.9))
    first.reply("/chat/completions", 200, label(0.7))
    second.reply("/chat/completions", 400, {"error": {"message": "model large is not loaded"}})


def counted(metrics: str, route: str) -> dict[str, float]:
    """``jevper_serve_escalations_total`` of ``route`` in a /metrics text, by outcome."""
    found = {}
    for line in metrics.splitlines():
        if line.startswith("jevper_serve_escalations_total{") and f'route="{route}"' in line:
            outcome = line.split('outcome="')[1].split('"')[0]
            found[outcome] = float(line.rsplit(" ", 1)[1])
    return found


def test_metrics_count_each_question_escalated_kept_or_failed_by_route_never_by_question_id(
    upstreams: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = upstreams
    escalated_kept_failed(first, second)
    with gateway(a, b, 0.8) as app:
        for _ in range(3):
            assert app.post("/v1/systemone", json=ASKED).status_code == 200
        metrics = app.get("/metrics").text
    assert counted(metrics, "/v1/systemone") == {"escalated": 1.0, "kept": 1.0, "failed": 1.0}
    assert "topic" not in "".join(line for line in metrics.splitlines() if "escalations" in line)


DECISION = {
    "model": "small",
    "input": "I was charged twice.",
    "questions": [
        {
            "type": "choice",
            "name": "topic",
            "instructions": "What is the message about?",
            "choices": [{"value": "billing"}, {"value": "other"}],
        }
    ],
}


def test_the_gateway_escalates_an_unsure_decisions_question_and_says_so_as_on_system_one(
    upstreams: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = upstreams
    escalated_kept_failed(first, second)
    with gateway(a, b, 0.8) as app:
        unsure = app.post("/v1/decisions", json=DECISION)
        sure = app.post("/v1/decisions", json=DECISION)
        failed = app.post("/v1/decisions", json=DECISION)
        metrics = app.get("/metrics").text
    assert unsure.status_code == 200, unsure.text
    (answer,) = unsure.json()["answers"]
    assert answer["choice"] == "other"
    assert answer["probabilities"][1]["probability"] == pytest.approx(0.9)
    assert unsure.headers[ESCALATION_HEADER] == "questions%5B0%5D=second; confidence=0.6; below=0.8"
    assert sure.json()["answers"][0]["choice"] == "billing"
    assert sure.headers[ESCALATION_HEADER] == "questions%5B0%5D=first; confidence=0.9; below=0.8"
    assert failed.json()["answers"][0]["choice"] == "billing"
    assert failed.headers[ESCALATION_HEADER].endswith("; failed=ProviderError")
    assert (len(first.requests), len(second.requests)) == (3, 2)
    assert counted(metrics, "/v1/decisions") == {"escalated": 1.0, "kept": 1.0, "failed": 1.0}
