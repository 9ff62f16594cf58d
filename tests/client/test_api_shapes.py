"""Questions and answers in the System One API's shape, on the prompt surfaces: what a question, a state
and an answer may be, the API's two confidences pinned by value, and text that cannot be sent refused
before anything is."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from jevper import (
    Choice,
    ChoiceAnswer,
    Example,
    InvalidQuestionError,
    Noul,
    NoulAnswer,
    Score,
    ScoreAnswer,
    SystemOneClient,
)
from jevper._distribution import choice_confidence, score_confidence

STATE = "I was charged twice."


def chat_json(answer: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": json.dumps(answer)}
    return {
        "object": "chat.completion",
        "model": "smollm2",
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }


def asked(loopback: Any, **settings: Any) -> SystemOneClient:
    sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    return SystemOneClient(sdk, model="smollm2", api="chat_completions", method="structured", **settings)


# --- the two confidences --------------------------------------------------------------------------------


def test_the_choice_confidence_reproduces_llamacpps_readme_example() -> None:
    assert round(choice_confidence([0.9998, 0.0001, 0.0001]), 4) == 0.9997


def test_the_score_confidence_reproduces_llamacpps_readme_example() -> None:
    assert round(score_confidence([0.0023, 0.116, 0.6753, 0.2064]), 4) == 0.673


@pytest.mark.parametrize("n", [2, 3, 7, 10])
def test_a_uniform_answer_has_confidence_0_and_a_certain_one_1(n: int) -> None:
    uniform = [1 / n] * n
    assert choice_confidence(uniform) == pytest.approx(0.0, abs=1e-12)
    assert score_confidence(uniform) == pytest.approx(0.0, abs=1e-12)
    one_hot = [1.0] + [0.0] * (n - 1)
    assert choice_confidence(one_hot) == score_confidence(one_hot) == 1.0


def test_a_single_option_or_level_is_certain() -> None:
    assert choice_confidence([1.0]) == score_confidence([1.0]) == 1.0


def test_the_confidences_differ_from_one_minus_the_normalized_entropy_the_old_code_gave() -> None:
    # By hand: choice (0.6 - 1/3) / (2/3) = 0.4; score k = 0, D = 0.3*1 + 0.1*2 = 0.5, U = (1+0+1)/3,
    # so 1 - 0.5 / (2/3) = 0.25. 1 - H/ln 3 gives 0.1827 for both (H = 0.8979 nats).
    probabilities = [0.6, 0.3, 0.1]
    entropy = -sum(p * math.log(p) for p in probabilities) / math.log(3)
    assert choice_confidence(probabilities) == pytest.approx(0.4)
    assert score_confidence(probabilities) == pytest.approx(0.25)
    assert 1 - entropy == pytest.approx(0.1827, abs=1e-4)


def test_a_score_peaked_at_one_end_loses_confidence_with_the_distance_of_its_mass() -> None:
    # Same peak mass, the rest one level away or three: only the score confidence tells them apart.
    near, far = [0.7, 0.3, 0.0, 0.0], [0.7, 0.0, 0.0, 0.3]
    assert choice_confidence(near) == choice_confidence(far)
    assert score_confidence(near) == pytest.approx(1 - 0.3 / 1.0)
    assert score_confidence(far) == pytest.approx(1 - 0.9 / 1.0)


def test_a_noul_confidence_is_the_choice_formula_over_yes_and_no(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat_json({"noul": 0.8}))
    answer = asked(loopback).system_one(state=STATE, questions={"q": Noul("Angry?")}).answers["q"]
    assert isinstance(answer, NoulAnswer)
    assert answer.confidence == pytest.approx(abs(2 * 0.8 - 1))


def test_an_emulated_answer_carries_the_apis_confidence(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat_json({"billing": 0.6, "technical": 0.3, "sales": 0.1}))
    loopback.reply("/chat/completions", 200, chat_json({"0": 0.6, "1": 0.3, "2": 0.1}))
    client = asked(loopback)
    choice = client.system_one(
        state=STATE, questions={"q": Choice(criteria={"billing": "a", "technical": "b", "sales": "c"})}
    ).answers["q"]
    score = client.system_one(state=STATE, questions={"q": Score(["low", "mid", "high"])}).answers["q"]
    assert choice.confidence == pytest.approx(0.4)
    assert score.confidence == pytest.approx(0.25)


# --- answers carry their type, and a score its legend ---------------------------------------------------


def test_every_answer_says_its_type_and_a_score_answer_maps_each_level_index_to_its_level(
    loopback: Any,
) -> None:
    loopback.reply("/chat/completions", 200, chat_json({"billing": 0.9, "technical": 0.1}))
    loopback.reply("/chat/completions", 200, chat_json({"noul": 0.3}))
    loopback.reply("/chat/completions", 200, chat_json({"0": 0.2, "1": 0.8}))
    response = asked(loopback, max_concurrency=1).system_one(
        state=STATE,
        questions={
            "c": Choice(criteria={"billing": "money", "technical": None}),
            "n": Noul("Angry?"),
            "s": Score(["calm", {"label": "angry", "signs": ["shouting"]}]),
        },
    )
    c, n, s = (response.answers[k] for k in "cns")
    assert (c.type, n.type, s.type) == ("choice", "noul", "score")
    assert isinstance(s, ScoreAnswer)
    assert s.legend == {0: "calm", 1: {"label": "angry", "signs": ["shouting"]}}


# --- questions as the API writes them -------------------------------------------------------------------


def test_a_choice_description_may_be_none_and_the_option_is_shown_by_name_alone(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat_json({"billing": 0.9, "technical": 0.1}))
    question = Choice(criteria={"billing": None, "technical": "errors"})
    asked(loopback).system_one(state=STATE, questions={"q": question})
    sent = loopback.bodies("/chat/completions")[0]
    prompt = sent["messages"][1]["content"]
    assert "- billing\n- technical: errors" in prompt
    schema = sent["response_format"]["json_schema"]["schema"]["properties"]
    assert "description" not in schema["billing"] and schema["technical"]["description"] == "errors"


def test_noul_criteria_may_be_the_apis_true_and_false_mapping_and_text_still_works(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat_json({"noul": 0.5}))
    loopback.reply("/chat/completions", 200, chat_json({"noul": 0.5}))
    client = asked(loopback)
    mapped = Noul("Angry?", criteria={"false": "calm words", "true": "shouting"})
    assert mapped.criteria == {"true": "shouting", "false": "calm words"}
    client.system_one(state=STATE, questions={"q": mapped})
    client.system_one(state=STATE, questions={"q": Noul("Angry?", criteria="shouting counts")})
    first, second = (body["messages"][1]["content"] for body in loopback.bodies("/chat/completions"))
    assert "Yes means: shouting\nNo means: calm words" in first
    assert "Criteria: shouting counts" in second


@pytest.mark.parametrize(
    ("criteria", "words"),
    [
        ({}, "expected criteria keys to be 'true', 'false' or both, got"),
        ({"true": "a", "false": "b", "maybe": "c"}, "'true', 'false' or both"),
        ({"yes": "a"}, "'true', 'false' or both"),
        (["a", "b"], "expected criteria to be text or {'true': ..., 'false': ...}"),
    ],
)
def test_noul_criteria_of_another_shape_are_refused(criteria: Any, words: str) -> None:
    with pytest.raises(InvalidQuestionError, match=words.replace("(", r"\(").replace("{", r"\{")):
        Noul("Angry?", criteria=criteria)


def test_instructions_and_levels_may_be_json_and_the_model_reads_them_as_json_text(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat_json({"0": 0.5, "1": 0.5}))
    question = Score([{"level": "low"}, ["high", "urgent"]], instructions={"task": "rate urgency"})
    asked(loopback).system_one(state=STATE, questions={"q": question})
    prompt = loopback.bodies("/chat/completions")[0]["messages"][1]["content"]
    assert prompt.startswith('{"task": "rate urgency"}\nLevels, lowest first:\n- 0: {"level": "low"}')
    assert '- 1: ["high", "urgent"]' in prompt


def test_a_plain_mapping_question_takes_the_same_shapes() -> None:
    from jevper.questions import as_question

    choice = as_question("q", {"type": "choice", "criteria": {"a": None, "b": {"x": 1}}})
    noul = as_question(
        "n", {"type": "noul", "instructions": ["Is it", "urgent?"], "criteria": {"true": "t", "false": None}}
    )
    assert isinstance(choice, Choice) and choice.criteria == {"a": None, "b": {"x": 1}}
    assert isinstance(noul, Noul) and noul.instructions == ["Is it", "urgent?"]


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (
            lambda: Choice(criteria={"a": 3, "b": None}),
            "expected the description of 'a' to be text, None, or a JSON",
        ),
        (lambda: Score(["low", None]), "expected level 1 to be text or a JSON object or array"),
        (
            lambda: Choice(criteria={"a": "x", "b": "y"}, instructions={}),
            "expected instructions to be text, None",
        ),
        (lambda: Noul(instructions=7), "expected instructions to be text, None"),  # type: ignore[arg-type]
        (lambda: Choice(criteria={"a": math.nan, "b": None}), "expected the description of 'a'"),
        (
            lambda: Choice(criteria={"a": {"weight": math.inf}, "b": None}),
            r"criteria\['a'\]\['weight'\]: expected a finite",
        ),
    ],
)
def test_values_the_api_does_not_take_are_refused_with_what_was_expected(build: Any, words: str) -> None:
    with pytest.raises(InvalidQuestionError, match=words):
        build()


def test_a_question_is_detached_from_the_callers_json_values() -> None:
    instructions = {"task": "route"}
    question = Choice(criteria={"a": None, "b": None}, instructions=instructions)
    instructions["task"] = "changed"
    assert question.instructions == {"task": "route"}


# --- states as the API writes them ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "shown"),
    [
        (
            {"customer": "Ann", "message": "charged twice"},
            'State:\n{"customer": "Ann", "message": "charged twice"}',
        ),
        (["charged twice", "no reply"], 'State:\n["charged twice", "no reply"]'),
        ([{"message": "charged twice"}], 'State:\n[{"message": "charged twice"}]'),
        (42, "State:\n42"),
    ],
)
def test_a_state_that_is_not_text_or_a_chat_list_reaches_the_model_as_json_text(
    loopback: Any, state: Any, shown: str
) -> None:
    loopback.reply("/chat/completions", 200, chat_json({"noul": 0.5}))
    asked(loopback).system_one(state=state, questions={"q": Noul("Angry?")})
    assert loopback.bodies("/chat/completions")[0]["messages"][-1] == {"role": "user", "content": shown}


def test_a_chat_list_state_is_still_a_conversation(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat_json({"noul": 0.5}))
    state = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    asked(loopback).system_one(state=state, questions={"q": Noul("Angry?")})
    assert loopback.bodies("/chat/completions")[0]["messages"][-2:] == state


@pytest.mark.parametrize("state", [None, [], {}, "  ", {1: "x"}, {"x": math.nan}, object()])
def test_a_state_with_nothing_to_judge_or_that_is_not_json_is_refused_before_sending(
    loopback: Any, state: Any
) -> None:
    with pytest.raises(InvalidQuestionError, match="state"):
        asked(loopback).system_one(state=state, questions={"q": Noul("Angry?")})
    assert loopback.requests == []


# --- text that cannot be sent as UTF-8 ------------------------------------------------------------------

BAD = "bill\udcff"


def surrogate_cases() -> list[tuple[str, Any, str]]:
    """(case, a function making the call's arguments, where the error must point)."""
    choice = {"a": "x", "b": "y"}
    return [
        ("state", lambda: {"state": BAD}, "state"),
        ("chat turn", lambda: {"state": [{"role": "user", "content": BAD}]}, r"state\[0\]\.content"),
        ("json state", lambda: {"state": {"note": BAD}}, r"state\['note'\]"),
        ("instructions", lambda: {"questions": {"q": Noul(BAD)}}, r"Noul\.instructions"),
        (
            "option name",
            lambda: {"questions": {"q": {"type": "choice", "criteria": {BAD: "x", "b": "y"}}}},
            r"questions\['q'\]\.criteria\['bill\\udcff'\]",
        ),
        (
            "description",
            lambda: {"questions": {"q": {"type": "choice", "criteria": {"a": BAD, "b": "y"}}}},
            r"questions\['q'\]\.criteria\['a'\]",
        ),
        ("level", lambda: {"questions": {"q": Score(["low", BAD])}}, r"Score\.criteria\[1\]"),
        (
            "json level",
            lambda: {"questions": {"q": Score(["low", {"x": [BAD]}])}},
            r"criteria\[1\]\['x'\]\[0\]",
        ),
        (
            "example state",
            lambda: {
                "examples": [Example(state=BAD, answers={"q": "a"})],
                "questions": {"q": Choice(choice)},
            },
            r"examples\[0\]\.state",
        ),
        (
            "example answer",
            lambda: {
                "examples": [Example(state="ok", answers={"q": BAD})],
                "questions": {"q": Choice(choice)},
            },
            r"examples\[0\]\.answers\['q'\]",
        ),
        ("extra_body", lambda: {"extra_body": {"user": BAD}}, r"extra_body\['user'\]"),
        ("question id", lambda: {"questions": {BAD: Noul("Angry?")}}, r"questions\['bill\\udcff'\]"),
    ]


@pytest.mark.parametrize("api", ["chat_completions", "responses", "messages", "systemone", "auto"])
@pytest.mark.parametrize(
    ("case", "arguments", "where"), surrogate_cases(), ids=[c[0] for c in surrogate_cases()]
)
def test_text_that_cannot_be_sent_as_utf8_is_refused_before_sending_naming_where_it_is(
    loopback: Any, api: str, case: str, arguments: Any, where: str
) -> None:
    if api == "messages":
        sdk: Any = Anthropic(base_url=loopback.url.removesuffix("/v1"), api_key="local", max_retries=0)
    else:
        sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    with pytest.raises(InvalidQuestionError, match=where) as refused:
        call = {"state": STATE, "questions": {"q": Choice({"a": "x", "b": "y"})}, **arguments()}
        SystemOneClient(sdk, model="smollm2", api=api).system_one(**call)
    assert "can be sent as UTF-8" in str(refused.value)
    str(refused.value).encode("utf-8")  # the message itself can be printed and logged
    assert loopback.requests == [] and loopback.listed == []


def test_an_emulated_choice_answer_round_trips_through_the_public_dataclass() -> None:
    answer = ChoiceAnswer("a", {"a": 0.75, "b": 0.25}, 0.5, "structured", "chat_completions")
    assert answer.type == "choice"
    with pytest.raises(TypeError):
        ChoiceAnswer("a", {"a": 1.0}, 1.0, "structured", "chat_completions", None, "score")  # type: ignore[call-arg]
