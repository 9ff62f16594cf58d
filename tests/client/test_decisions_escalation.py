"""``escalate=`` on ``decisions.create``, both clients, against two scripted System One servers that answer
differently: by ``system_one``'s one rule, a question whose top probability is below the threshold is asked
again of the second client (only it, in one call), one at or above it is not; a refused question is asked
again; a second server that fails leaves the first answer, its failure typed; each question's route is in
``debug["escalation"]`` as ``system_one`` keeps it, and the usage counts both calls."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai.types
import pytest
from _decisions_data import INPUT, QUESTIONS, REFUSAL
from openai import AsyncOpenAI, OpenAI

from jevper import AsyncSystemOneClient, ConfigError, Escalation, SystemOneClient
from jevper._distribution import choice_confidence
from jevper.calibration import Binding, Calibration, Calibrator, QuestionCalibration, Threshold, prompt_digest
from jevper.decisions import DecisionChoice, DecisionPredicate, DecisionRefusal
from jevper.testing.bodies import chat_label
from jevper.testing.faults import FaultServer, running
from jevper.testing.script import Script


def body(model: str, answers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A System One answer, each question's (by the id a Decisions call asks it under) as given."""
    return {"model": model, "answers": answers, "usage": {"input_tokens": 10, "output_tokens": 1}}


def noul(p: float) -> dict[str, Any]:
    return {"type": "noul", "noul": p}


def choice(billing: float) -> dict[str, Any]:
    probabilities = {"billing": billing, "shipping": 1 - billing}
    return {
        "type": "choice",
        "choice": "billing" if billing >= 0.5 else "shipping",
        "probabilities": probabilities,
        "confidence": choice_confidence(list(probabilities.values())),
    }


@pytest.fixture
def servers() -> Iterator[tuple[Script, Script, FaultServer, FaultServer]]:
    first, second = Script(), Script()
    with running(script=first, model="small") as a, running(script=second, model="large") as b:
        yield first, second, a, b


def blocking(a: FaultServer, b: FaultServer, below: float | str, **weak: Any) -> SystemOneClient:
    """The small model's client, escalating below ``below`` to the large one's; ``weak`` sets the small
    client's other settings (System One by default)."""
    strong = SystemOneClient(
        OpenAI(base_url=b.base_url(), api_key="none", max_retries=0), model="large", api="systemone"
    )
    return SystemOneClient(
        OpenAI(base_url=a.base_url(), api_key="none", max_retries=0),
        model="small",
        escalate=Escalation(strong, below),
        **{"api": "systemone", **weak},
    )


def test_a_decisions_question_below_the_threshold_is_asked_again_of_the_second_client_and_only_it(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    first.reply("/systemone", 200, body("small", {"questions[0]": noul(0.95), "questions[1]": choice(0.6)}))
    second.reply("/systemone", 200, body("large", {"questions[0]": choice(0.1)}))
    decision = blocking(a, b, 0.8).decisions.create(input=INPUT, questions=QUESTIONS)
    # Only the unsure question went to the second server, about the same input.
    (asked,) = second.bodies("/systemone")
    assert len(asked["questions"]) == 1 and "What is the message about?" in str(asked["questions"])
    assert INPUT in str(asked)
    refund, topic = decision.answers
    assert isinstance(refund, DecisionPredicate) and refund.probability == pytest.approx(0.95)
    assert isinstance(topic, DecisionChoice) and topic.choice == "shipping" and topic.name == "topic"
    routes = decision.debug["escalation"]["questions"]
    assert routes["questions[1]"]["answered_by"] == "second"
    assert (routes["questions[1]"]["confidence"], routes["questions[1]"]["below"]) == (
        pytest.approx(0.6),
        0.8,
    )
    assert routes["questions[1]"]["first"]["choice"] == "billing"
    assert routes["questions[1]"]["second"]["choice"] == "shipping"
    assert routes["questions[0]"]["answered_by"] == "first" and routes["questions[0]"]["escalated"] is False
    named = decision.debug["escalation"]["servers"]
    assert (named["first"]["model"], named["second"]["model"]) == ("small", "large")
    assert decision.usage.requests == 2 and decision.usage.input_tokens == 20
    openai.types.Decision.model_validate(decision.to_api())


def test_a_decisions_call_sure_of_every_answer_asks_the_second_client_nothing(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    first.reply("/systemone", 200, body("small", {"questions[0]": noul(0.1), "questions[1]": choice(0.8)}))
    decision = blocking(a, b, 0.8).decisions.create(input=INPUT, questions=QUESTIONS)
    assert second.requests == []
    assert [r["answered_by"] for r in decision.debug["escalation"]["questions"].values()] == [
        "first",
        "first",
    ]
    assert decision.usage.requests == 1


def test_a_second_client_that_fails_leaves_the_first_decisions_answer_with_its_failure_typed(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    first.reply("/systemone", 200, body("small", {"questions[0]": noul(0.55), "questions[1]": choice(0.9)}))
    second.reply("/systemone", 400, {"error": {"message": "model large is not loaded"}})
    decision = blocking(a, b, 0.8).decisions.create(input=INPUT, questions=QUESTIONS)
    refund = decision.answers[0]
    assert isinstance(refund, DecisionPredicate) and refund.probability == pytest.approx(0.55)
    route = decision.debug["escalation"]["questions"]["questions[0]"]
    assert route["answered_by"] == "first" and route["escalated"] is True
    assert route["failure"]["type"] == "ProviderError"
    assert "not loaded" in route["failure"]["message"]


def test_a_refused_decisions_question_is_asked_again_of_the_second_client(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    # Asked on Chat Completions one question at a time: the predicate answered, the choice refused.
    first.reply("/chat/completions", 200, chat_label())
    first.reply("/chat/completions", 200, REFUSAL)
    second.reply("/systemone", 200, body("large", {"questions[0]": choice(0.9)}))
    # Any answer's top probability is at least 0.5: only the refusal is asked again.
    weak = blocking(a, b, 0.5, api="chat_completions", method="logprobs", max_concurrency=1)
    decision = weak.decisions.create(input=INPUT, questions=QUESTIONS)
    topic = decision.answers[1]
    assert isinstance(topic, DecisionChoice) and topic.choice == "billing"
    routes = decision.debug["escalation"]["questions"]
    assert routes["questions[1]"]["answered_by"] == "second" and routes["questions[1]"]["confidence"] == 0.0
    assert routes["questions[1]"]["first"] == DecisionRefusal("topic").to_api()
    assert routes["questions[0]"]["answered_by"] == "first"
    assert len(second.bodies("/systemone")) == 1


def test_the_async_client_escalates_a_decisions_call_alike(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    first.reply("/systemone", 200, body("small", {"questions[0]": noul(0.95), "questions[1]": choice(0.6)}))
    second.reply("/systemone", 200, body("large", {"questions[0]": choice(0.1)}))

    async def asked() -> Any:
        strong = AsyncSystemOneClient(
            AsyncOpenAI(base_url=b.base_url(), api_key="none", max_retries=0), model="large", api="systemone"
        )
        weak = AsyncSystemOneClient(
            AsyncOpenAI(base_url=a.base_url(), api_key="none", max_retries=0),
            model="small",
            api="systemone",
            escalate=Escalation(strong, 0.8),
        )
        return await weak.decisions.create(input=INPUT, questions=QUESTIONS)

    decision = asyncio.run(asked())
    assert len(second.bodies("/systemone")) == 1
    topic = decision.answers[1]
    assert isinstance(topic, DecisionChoice) and topic.choice == "shipping"
    assert decision.debug["escalation"]["questions"]["questions[1]"]["answered_by"] == "second"
    assert decision.usage.requests == 2


FIT: dict[str, Any] = {
    "refund": {"type": "noul", "instructions": "Does the customer want money back?"},
    "topic": {
        "type": "choice",
        "instructions": "What is the message about?",
        "criteria": {"billing": None, "shipping": None},
    },
}


def thresholds(**by_question: Threshold) -> Calibration:
    """An identity calibration of the questions, by name, each with the guaranteed threshold given."""
    bound = Binding("faults", "test", "small", "native", "systemone", prompt_digest(FIT))
    kinds = {"refund": ("noul", ("true", "false")), "topic": ("choice", ("billing", "shipping"))}
    questions = {
        name: QuestionCalibration(*kinds[name], Calibrator("identity"), {}, threshold=threshold)
        for name, threshold in by_question.items()
    }
    return Calibration(bound, questions, folds=5, seed=0).with_layouts(FIT)


def test_auto_holds_each_decisions_answer_to_its_questions_threshold_by_name_and_label(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    calibration = thresholds(
        refund=Threshold(0.9, 0.1, 200, top_probability=0.5),
        topic=Threshold(0.9, 0.1, 200, top_probability=0.5, per_label={"billing": 0.7}),
    )
    # billing's own threshold (0.7) is above its 0.65; refund's 0.9 is above the question's 0.5.
    first.reply("/systemone", 200, body("small", {"questions[0]": noul(0.9), "questions[1]": choice(0.65)}))
    second.reply("/systemone", 200, body("large", {"questions[0]": choice(0.2)}))
    decision = blocking(a, b, "auto", calibration=calibration).decisions.create(
        input=INPUT, questions=QUESTIONS
    )
    routes = decision.debug["escalation"]["questions"]
    assert (routes["questions[0]"]["answered_by"], routes["questions[0]"]["below"]) == ("first", 0.5)
    assert (routes["questions[1]"]["answered_by"], routes["questions[1]"]["below"]) == ("second", 0.7)
    assert decision.debug["escalation"]["below"] == "auto"
    assert len(second.requests) == 1


def test_auto_without_a_threshold_for_a_decisions_question_is_refused_before_any_request(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    weak = blocking(a, b, "auto", calibration=thresholds(topic=Threshold(0.9, 0.1, 200, top_probability=0.5)))
    with pytest.raises(ConfigError, match="expected a guaranteed threshold for question 'refund'"):
        weak.decisions.create(input=INPUT, questions=QUESTIONS)
    assert first.requests == [] and second.requests == []
