"""``escalate=`` on both clients, against two scripted System One servers that answer differently: a
question whose calibrated top probability is below the threshold is asked again of the second client
(only it), one at or above it is not; ``auto`` reads the first calibration's guaranteed thresholds, per
label; each client's own calibration applies to its own answers; a second server that fails leaves the
first answer, its failure noted with its type; the route and both answers are in ``debug``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from jevper import AsyncSystemOneClient, ConfigError, Escalation, SystemOneClient
from jevper._distribution import choice_confidence
from jevper.calibration import Binding, Calibration, Calibrator, QuestionCalibration, Threshold, prompt_digest
from jevper.testing.faults import FaultServer, running
from jevper.testing.script import Script

QUESTIONS: dict[str, Any] = {
    "topic": {"type": "choice", "criteria": {"billing": "a charge", "other": "anything else"}},
    "urgent": {"type": "noul", "instructions": "Does the writer need an answer today?"},
}
STATE = "I was charged twice for one order."


def body(model: str, topic: dict[str, float] | None = None, urgent: float | None = None) -> dict[str, Any]:
    """A System One answer to the questions given a distribution."""
    answers: dict[str, Any] = {}
    if topic is not None:
        best = max(topic, key=lambda option: topic[option])
        answers["topic"] = {
            "type": "choice",
            "choice": best,
            "probabilities": topic,
            "confidence": choice_confidence(list(topic.values())),
        }
    if urgent is not None:
        answers["urgent"] = {"type": "noul", "noul": urgent}
    return {"model": model, "answers": answers, "usage": {"input_tokens": 10, "output_tokens": 1}}


@pytest.fixture
def servers() -> Iterator[tuple[Script, Script, FaultServer, FaultServer]]:
    first, second = Script(), Script()
    with running(script=first, model="small") as a, running(script=second, model="large") as b:
        yield first, second, a, b


def clients(
    a: FaultServer, b: FaultServer, below: float | str, **first_options: Any
) -> tuple[SystemOneClient, SystemOneClient]:
    strong = SystemOneClient(OpenAI(base_url=b.base_url(), api_key="none"), model="large", api="systemone")
    weak = SystemOneClient(
        OpenAI(base_url=a.base_url(), api_key="none"),
        model="small",
        api="systemone",
        escalate=Escalation(strong, below),
        **first_options,
    )
    return weak, strong


def test_a_question_below_the_threshold_is_asked_again_of_the_second_server_and_only_it(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    first.reply("/systemone", 200, body("small", {"billing": 0.6, "other": 0.4}, urgent=0.95))
    second.reply("/systemone", 200, body("large", {"billing": 0.1, "other": 0.9}))
    weak, _ = clients(a, b, 0.8)
    response = weak.system_one(state=STATE, questions=QUESTIONS)
    # Only the unsure question went to the second server, about the same state.
    (asked,) = second.bodies("/systemone")
    assert list(asked["questions"]) == ["topic"]
    assert STATE in str(asked["state"])
    assert response.choices["topic"].choice == "other"
    assert response.nouls["urgent"].noul == pytest.approx(0.95)
    route = response.debug["escalation"]["questions"]
    assert route["topic"]["answered_by"] == "second"
    assert (route["topic"]["confidence"], route["topic"]["below"]) == (pytest.approx(0.6), 0.8)
    assert route["topic"]["first"]["choice"] == "billing"
    assert route["topic"]["second"]["choice"] == "other"
    assert route["urgent"] == {
        "answered_by": "first",
        "escalated": False,
        "confidence": pytest.approx(0.95),
        "below": 0.8,
        "first": {"type": "noul", "noul": pytest.approx(0.95)},
        "second": None,
        "failure": None,
    }
    servers_named = response.debug["escalation"]["servers"]
    assert (servers_named["first"]["model"], servers_named["second"]["model"]) == ("small", "large")
    assert response.usage.n_calls == 2
    assert response.usage.input_tokens == 20


def test_an_answer_at_or_above_the_threshold_is_not_asked_again(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    first.reply("/systemone", 200, body("small", {"billing": 0.6, "other": 0.4}, urgent=0.95))
    first.reply("/systemone", 200, body("small", {"billing": 0.6, "other": 0.4}, urgent=0.95))
    at, _ = clients(a, b, 0.6)
    response = at.system_one(state=STATE, questions=QUESTIONS)
    above, _ = clients(a, b, 0.55)
    assert above.system_one(state=STATE, questions=QUESTIONS).choices["topic"].choice == "billing"
    assert second.requests == []
    assert response.choices["topic"].choice == "billing"
    assert {qid: r["answered_by"] for qid, r in response.debug["escalation"]["questions"].items()} == {
        "topic": "first",
        "urgent": "first",
    }
    assert response.usage.n_calls == 1


def test_a_second_server_that_fails_leaves_the_first_answer_with_its_failure_typed(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    first.reply("/systemone", 200, body("small", {"billing": 0.55, "other": 0.45}, urgent=0.5))
    second.reply("/systemone", 400, {"detail": "model large is not loaded"})
    weak, _ = clients(a, b, 0.9)
    response = weak.system_one(state=STATE, questions=QUESTIONS)
    assert response.choices["topic"].choice == "billing"
    assert response.nouls["urgent"].noul == pytest.approx(0.5)
    routes = response.debug["escalation"]["questions"]
    for qid in ("topic", "urgent"):
        assert routes[qid]["answered_by"] == "first"
        assert routes[qid]["escalated"] is True
        assert routes[qid]["second"] is None
        assert routes[qid]["failure"]["type"] == "ProviderError"
        assert "not loaded" in routes[qid]["failure"]["message"]
    (asked,) = second.bodies("/systemone")
    assert list(asked["questions"]) == ["topic", "urgent"]


def threshold_calibration(model: str, **threshold: Any) -> Calibration:
    bound = Binding("faults", "test", model, "native", "systemone", prompt_digest(QUESTIONS))
    question = QuestionCalibration(
        "choice",
        ("billing", "other"),
        Calibrator("identity"),
        {},
        threshold=Threshold(0.9, 0.1, 200, **threshold),
    )
    urgent = QuestionCalibration(
        "noul", ("true", "false"), Calibrator("identity"), {}, threshold=Threshold(0.9, 0.1, 200, None)
    )
    return Calibration(bound, {"topic": question, "urgent": urgent}, folds=5, seed=0).with_layouts(QUESTIONS)


def test_auto_holds_each_answer_to_the_first_calibrations_threshold_for_its_label(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    # billing's own threshold (0.7) is above its 0.65; other falls back to the question's (0.5).
    calibration = threshold_calibration("small", top_probability=0.5, per_label={"billing": 0.7})
    first.reply("/systemone", 200, body("small", {"billing": 0.65, "other": 0.35}, urgent=0.99))
    first.reply("/systemone", 200, body("small", {"billing": 0.35, "other": 0.65}))
    second.reply("/systemone", 200, body("large", {"billing": 0.05, "other": 0.95}, urgent=0.2))
    weak, _ = clients(a, b, "auto", calibration=calibration)
    billing = weak.system_one(state=STATE, questions=QUESTIONS).debug["escalation"]["questions"]
    assert (billing["topic"]["answered_by"], billing["topic"]["below"]) == ("second", 0.7)
    # urgent's threshold is None (none met the target): every answer of it is asked again.
    assert (billing["urgent"]["answered_by"], billing["urgent"]["below"]) == ("second", None)
    other = weak.system_one(state=STATE, questions={"topic": QUESTIONS["topic"]}).debug["escalation"]
    assert (other["questions"]["topic"]["answered_by"], other["questions"]["topic"]["below"]) == (
        "first",
        0.5,
    )
    assert other["below"] == "auto"
    assert len(second.requests) == 1


def test_auto_without_a_threshold_for_a_question_is_refused_before_any_request(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    with pytest.raises(ConfigError, match="expected a calibration"):
        clients(a, b, "auto")
    calibration = threshold_calibration("small", top_probability=0.5)
    only_topic = Calibration(
        calibration.bound_to, {"topic": calibration.questions["topic"]}, folds=5, seed=0
    ).with_layouts(QUESTIONS)
    weak, _ = clients(a, b, "auto", calibration=only_topic)
    with pytest.raises(ConfigError, match="expected a guaranteed threshold for question 'urgent'"):
        weak.system_one(state=STATE, questions=QUESTIONS)
    assert first.requests == [] and second.requests == []


def test_each_servers_calibration_applies_to_its_own_answers(
    servers: tuple[Script, Script, FaultServer, FaultServer], tmp_path: Path
) -> None:
    first, second, a, b = servers
    bound = Binding("faults", "test", "large", "native", "systemone", prompt_digest(QUESTIONS))
    prior = QuestionCalibration("choice", ("billing", "other"), Calibrator("prior", prior=(0.25, 0.75)), {})
    path = tmp_path / "large.json"
    Calibration(bound, {"topic": prior}, folds=5, seed=0).with_layouts(QUESTIONS).save(path)
    first.reply("/systemone", 200, body("small", {"billing": 0.6, "other": 0.4}, urgent=0.9))
    second.reply("/systemone", 200, body("large", {"billing": 0.5, "other": 0.5}))
    strong = SystemOneClient(
        OpenAI(base_url=b.base_url(), api_key="none"), model="large", api="systemone", calibration=path
    )
    weak = SystemOneClient(
        OpenAI(base_url=a.base_url(), api_key="none"),
        model="small",
        api="systemone",
        escalate=Escalation(strong, 0.8),
    )
    response = weak.system_one(state=STATE, questions=QUESTIONS)
    # The second's prior correction: 0.5 / 0.25 against 0.5 / 0.75, so billing 0.75.
    assert response.choices["topic"].probabilities == pytest.approx({"billing": 0.75, "other": 0.25})
    escalation = response.debug["escalation"]
    assert escalation["questions"]["topic"]["first"]["probabilities"] == pytest.approx(
        {"billing": 0.6, "other": 0.4}
    )
    assert escalation["second_debug"]["calibration"]["file"] == str(path)
    assert "calibration" not in response.debug  # the first client has none


def test_escalation_asks_a_client_of_the_same_kind() -> None:
    sync = SystemOneClient(OpenAI(base_url="http://127.0.0.1:9/v1", api_key="none"), model="large")
    with pytest.raises(ConfigError, match="expected a AsyncSystemOneClient"):
        AsyncSystemOneClient(
            AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="none"),
            model="small",
            escalate=Escalation(sync, 0.5),
        )
    with pytest.raises(ConfigError, match=r"expected a top probability in \(0, 1\]"):
        Escalation(sync, 1.5)


def test_the_async_client_escalates_the_same_way(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    first.reply("/systemone", 200, body("small", {"billing": 0.52, "other": 0.48}, urgent=0.97))
    second.reply("/systemone", 200, body("large", {"billing": 0.97, "other": 0.03}))

    async def asked() -> Any:
        strong = AsyncSystemOneClient(
            AsyncOpenAI(base_url=b.base_url(), api_key="none"), model="large", api="systemone"
        )
        weak = AsyncSystemOneClient(
            AsyncOpenAI(base_url=a.base_url(), api_key="none"),
            model="small",
            api="systemone",
            escalate=Escalation(strong, 0.75),
        )
        return await weak.system_one(state=STATE, questions=QUESTIONS)

    response = asyncio.run(asked())
    assert response.choices["topic"].probabilities == pytest.approx({"billing": 0.97, "other": 0.03})
    routes = response.debug["escalation"]["questions"]
    assert (routes["topic"]["answered_by"], routes["urgent"]["answered_by"]) == ("second", "first")
    (asked_again,) = second.bodies("/systemone")
    assert list(asked_again["questions"]) == ["topic"]
