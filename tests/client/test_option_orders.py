"""``option_orders=N``: a choice asked with its options in N cyclic orders, its answer the mean of the N
distributions read back option by option; through the real openai SDK against a loopback server that
answers each order with a label distribution written here."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from _label_answers import label
from openai import AsyncOpenAI, OpenAI

from jevper import (
    AsyncSystemOneClient,
    CalibrationMismatchError,
    Choice,
    InvalidQuestionError,
    Noul,
    Score,
    SystemOneClient,
    _native,
)
from jevper._orders import orders_of
from jevper.calibration import Binding, Calibration, Calibrator, QuestionCalibration, prompt_digest
from jevper.decisions import call as _decisions

STATE = "My parcel never arrived and I was charged twice."
TOPIC = Choice(criteria={"billing": "a charge", "other": "anything else", "shipping": "a parcel"})
# Order 0 (billing, other, shipping) says billing; order 1 (other, shipping, billing) says shipping. The
# mean: billing (0.5 + 0.4) / 2, other (0.1 + 0.05) / 2, shipping (0.4 + 0.55) / 2: shipping.
FIRST = {"A": 0.5, "B": 0.1, "C": 0.4}
SECOND = {"A": 0.05, "B": 0.55, "C": 0.4}
MEAN = {"billing": 0.45, "other": 0.075, "shipping": 0.475}
HOW: dict[str, Any] = {"api": "chat_completions", "method": "logprobs"}


def answered(alternatives: dict[str, float]) -> dict[str, Any]:
    """A label answer choosing the most probable of ``alternatives``."""
    return label(max(alternatives, key=lambda t: alternatives[t]), alternatives)


def shown_options(body: dict[str, Any]) -> list[str]:
    """The options a request lists, in order ("A: billing — a charge" lines)."""
    prompt = "\n".join(str(m["content"]) for m in body["messages"])
    shown = [line.partition(": ")[2] for line in prompt.splitlines() if line[1:3] == ": "]
    return [option.partition(" — ")[0] for option in shown]


def check_averaged(response: Any, loopback: Any) -> None:
    answer = response.answers["topic"]
    assert answer.probabilities == pytest.approx(MEAN)
    assert list(answer.probabilities) == list(TOPIC.options)  # the question's own order, not an asked one
    assert answer.choice == "shipping"
    assert answer.confidence == pytest.approx((0.475 - 1 / 3) / (1 - 1 / 3))
    assert sum(answer.probabilities.values()) == pytest.approx(1.0)
    sent = loopback.bodies("/chat/completions")
    assert [shown_options(body) for body in sent] == [
        ["billing", "other", "shipping"],
        ["other", "shipping", "billing"],
    ]
    assert response.usage.n_calls == 2 and response.usage.input_tokens == 200
    trace = response.debug["questions"]["topic"]
    assert trace["requests"] == 2
    assert trace["why"][-1] == (
        "the mean of 2 orders of the options (option_orders); their choices: ['billing', 'shipping']"
    )


def test_a_choice_asked_in_two_orders_answers_with_the_mean_of_both_read_back_option_by_option(
    loopback: Any,
) -> None:
    loopback.reply("/chat/completions", 200, answered(FIRST))
    loopback.reply("/chat/completions", 200, answered(SECOND))
    sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    # One request at a time, so the replies queued meet the orders in turn.
    client = SystemOneClient(sdk, model="smollm2", **HOW, option_orders=2, max_concurrency=1)
    check_averaged(client.system_one(state=STATE, questions={"topic": TOPIC}), loopback)


def test_the_async_client_averages_alike_and_a_call_may_set_its_own_option_orders(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, answered(FIRST))
    loopback.reply("/chat/completions", 200, answered(SECOND))

    async def ask() -> Any:
        sdk = AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0)
        client = AsyncSystemOneClient(sdk, model="smollm2", **HOW, max_concurrency=1)
        return await client.system_one(state=STATE, questions={"topic": TOPIC}, option_orders=2)

    check_averaged(asyncio.run(ask()), loopback)


def test_the_orders_are_asked_at_once_as_a_calls_questions_are_and_a_failed_order_fails_the_question(
    loopback: Any,
) -> None:
    loopback.delay = 0.3
    for _ in range(2):
        loopback.reply("/chat/completions", 200, answered(FIRST))
    sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    client = SystemOneClient(sdk, model="smollm2", **HOW, option_orders=2)
    client.system_one(state=STATE, questions={"topic": TOPIC})
    assert loopback.most_in_flight == 2
    # One order's reply unreadable: Decisions' refusal for that question, the other question answered.
    loopback.delay = 0.0  # the delay only showed the two orders in flight at once
    loopback.reply("/chat/completions", 200, answered(FIRST))
    loopback.reply("/chat/completions", 200, {"object": "chat.completion", "choices": []})
    loopback.reply("/chat/completions", 200, answered({"A": 0.9, "B": 0.1}))
    one = SystemOneClient(sdk, model="smollm2", **HOW, option_orders=2, max_concurrency=1)
    decided = one.decisions.create(
        input=STATE,
        questions=[
            {
                "type": "choice",
                "instructions": "Which topic?",
                "choices": [{"value": v} for v in TOPIC.options],
            },
            {"type": "predicate", "instructions": "Is it urgent?"},
        ],
    )
    assert decided.answers[0].type == "refusal" and decided.answers[1].type != "refusal"


def test_one_order_is_asked_by_default_and_no_more_orders_than_options_however_many_are_asked() -> None:
    assert orders_of(TOPIC, 1) == [0]
    assert orders_of(TOPIC, 2) == [0, 1]
    assert orders_of(TOPIC, 9) == [0, 1, 2]
    # Yes/no questions and scores have an order of meaning: asked once.
    assert orders_of(Noul(instructions="Is it urgent?"), 4) == [0]
    assert orders_of(Score(criteria=["calm", "annoyed", "furious"]), 4) == [0]
    assert list(TOPIC.rotated(1).criteria) == ["other", "shipping", "billing"]
    assert TOPIC.rotated(3) == TOPIC


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_option_orders_that_are_not_a_positive_integer_are_refused_naming_the_value(value: Any) -> None:
    with pytest.raises(
        InvalidQuestionError, match=rf"option_orders: expected an integer of at least 1, got {value!r}"
    ):
        SystemOneClient(object(), model="m", option_orders=value)


def test_a_native_route_that_asks_each_question_once_refuses_several_orders() -> None:
    with pytest.raises(InvalidQuestionError, match=r"api='systemone' with option_orders=2: expected 1"):
        SystemOneClient(object(), model="m", api="systemone", option_orders=2)


def test_under_api_auto_several_orders_skip_the_servers_own_routes_which_ask_each_question_once() -> None:
    one = SystemOneClient(object(), model="m")
    two = SystemOneClient(object(), model="m", option_orders=2)
    assert _native.discovers(one.options, one._memory) and not _native.discovers(two.options, two._memory)
    assert _decisions.asks_natively(one.options, one._memory)
    assert not _decisions.asks_natively(two.options, two._memory)


def test_a_calibration_fit_on_answers_of_another_number_of_orders_is_refused_naming_option_orders() -> None:
    fit = {"topic": TOPIC}
    calibration = Calibration(
        Binding("llamacpp", "b11549", "m", "logprobs", "chat_completions", prompt_digest(fit)),
        {
            "topic": QuestionCalibration(
                "choice", TOPIC.options, Calibrator("prior", prior=(0.5, 0.2, 0.3)), {}
            )
        },
        folds=5,
        seed=0,
    ).with_layouts(fit)
    with pytest.raises(CalibrationMismatchError) as refused:
        SystemOneClient(object(), model="m", method="logprobs", option_orders=2, calibration=calibration)
    assert (refused.value.field, refused.value.expected, refused.value.got) == ("option_orders", 1, 2)
    # Fit on answers averaged over two orders, it is taken by a client asking two, and no other.
    two = dataclasses.replace(
        calibration, bound_to=dataclasses.replace(calibration.bound_to, option_orders=2)
    )
    SystemOneClient(object(), model="m", method="logprobs", option_orders=2, calibration=two)
    with pytest.raises(CalibrationMismatchError, match=r"option_orders 2, got 1"):
        SystemOneClient(object(), model="m", method="logprobs", calibration=two)
    # A file written before option orders were bound (version 2) was fit on answers asked in one order.
    written = two.to_json()
    written["version"] = 2
    del written["bound_to"]["option_orders"]
    assert Calibration.of_json(written).bound_to.option_orders == 1


def test_the_model_s_own_numbers_asked_for_are_averaged_as_shown_while_the_pick_folds_the_rescaled_orders(
    loopback: Any,
) -> None:
    # Order 0 (billing, other, shipping) holds a tenth of the mass, sure of billing; order 1 (other,
    # shipping, billing) all of it, leaning to shipping. Rescaled, the mean is billing 0.55, other 0.155,
    # shipping 0.295; the raw numbers' mean (0.145, 0.1505, 0.2545) would pick shipping at confidence 0.
    loopback.reply("/chat/completions", 200, answered({"A": 0.09, "B": 0.001, "C": 0.009}))
    loopback.reply("/chat/completions", 200, answered({"A": 0.3, "B": 0.5, "C": 0.2}))
    sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    client = SystemOneClient(sdk, model="smollm2", **HOW, option_orders=2, max_concurrency=1)
    raw = client.system_one(state=STATE, questions={"topic": TOPIC}, normalize_probabilities=False).answers[
        "topic"
    ]
    assert raw.choice == "billing"
    assert raw.confidence == pytest.approx((0.55 - 1 / 3) / (1 - 1 / 3))
    # The numbers shown are the model's own, each option's mean over the orders, as asked.
    assert raw.probabilities == pytest.approx({"billing": 0.145, "other": 0.1505, "shipping": 0.2545})
    loopback.reply("/chat/completions", 200, answered({"A": 0.09, "B": 0.001, "C": 0.009}))
    loopback.reply("/chat/completions", 200, answered({"A": 0.3, "B": 0.5, "C": 0.2}))
    rescaled = client.system_one(state=STATE, questions={"topic": TOPIC}).answers["topic"]
    assert (rescaled.choice, rescaled.confidence) == (raw.choice, raw.confidence)
    assert rescaled.probabilities == pytest.approx({"billing": 0.55, "other": 0.155, "shipping": 0.295})
