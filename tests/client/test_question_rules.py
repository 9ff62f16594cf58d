"""A question's rules, defined once (jevper.questions) as the System One API states them
(shared/systemone.md): what each type accepts, and where a refusal says the problem sits."""

from __future__ import annotations

from typing import Any

import pytest
from openai import OpenAI

from jevper import Choice, InvalidQuestionError, Noul, Score, SystemOneClient
from jevper._native import question_body
from jevper.questions import TYPES, as_question


@pytest.mark.parametrize(
    "noul",
    [
        Noul(),
        Noul("Angry?"),
        Noul(criteria={"true": "shouting"}),
        Noul(criteria={"false": "calm words"}),
        Noul("Angry?", criteria={"true": None, "false": "calm words"}),
        Noul("Angry?", criteria=None),
    ],
    ids=["bare", "instructions", "true-only", "false-only", "two-sided", "null"],
)
def test_a_noul_takes_every_shape_the_api_takes_and_is_sent_in_it(noul: Noul) -> None:
    body = question_body(noul)
    assert body["type"] == "noul" and body["instructions"]  # the default when none is given
    if isinstance(noul.criteria, dict):
        assert body["criteria"] == noul.criteria
    else:
        assert "criteria" not in body


def test_a_one_sided_noul_is_asked_with_only_its_side_on_a_prompt_surface(loopback: Any) -> None:
    answer = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"content": '{"noul": 0.8}'}}]}
    loopback.reply("/chat/completions", 200, answer)
    client = SystemOneClient(
        OpenAI(base_url=loopback.url, api_key="local", max_retries=0),
        model="smollm2",
        api="chat_completions",
        method="structured",
    )
    response = client.system_one(
        state="WHY IS THIS BROKEN", questions={"q": Noul(criteria={"true": "shouting"})}
    )
    prompt = loopback.bodies("/chat/completions")[0]["messages"][1]["content"]
    assert prompt.startswith(f"{Noul.DEFAULT_INSTRUCTIONS}\nYes means: shouting\n")
    assert "No means" not in prompt
    assert response.answers["q"].noul == pytest.approx(0.8)  # type: ignore[union-attr]


def test_the_limits_are_the_apis_at_both_ends() -> None:
    assert len(Choice({f"o{i}": None for i in range(2)}).options) == 2
    assert len(Choice({f"o{i}": None for i in range(255)}).options) == 255
    assert len(Score(["a", "b"]).options) == 2 and len(Score([str(i) for i in range(26)]).options) == 26
    for build in (
        lambda: Choice({"o": None}),
        lambda: Choice({f"o{i}": None for i in range(256)}),
        lambda: Score(["a"]),
        lambda: Score([str(i) for i in range(27)]),
    ):
        with pytest.raises(InvalidQuestionError, match="expected"):
            build()
    assert sorted(TYPES) == ["choice", "noul", "score"]


@pytest.mark.parametrize(
    ("question", "loc"),
    [
        ({"type": "choice", "criteria": {"a": None}}, ("questions", "route", "criteria")),
        ({"type": "choice", "criteria": {"a": 3, "b": None}}, ("questions", "route", "criteria", "a")),
        (
            {"type": "choice", "criteria": {"a": None, "b": None}, "instructions": ""},
            ("questions", "route", "instructions"),
        ),
        ({"type": "choice"}, ("questions", "route", "criteria")),
        ({"type": "score", "criteria": ["low", None]}, ("questions", "route", "criteria", 1)),
        ({"type": "noul", "criteria": {"maybe": "x"}}, ("questions", "route", "criteria")),
        ({"type": "noul", "criteria": {"true": 3}}, ("questions", "route", "criteria", "true")),
        ({"type": "rank"}, ("questions", "route", "type")),
        ({"type": "noul", "weight": 2}, ("questions", "route", "weight")),
        ("not a question", ("questions", "route")),
    ],
)
def test_a_refused_question_says_where_the_problem_sits(question: Any, loc: tuple[Any, ...]) -> None:
    with pytest.raises(InvalidQuestionError) as refused:
        as_question("route", question)
    assert refused.value.loc == loc
    assert str(refused.value) == f"questions['route']: {refused.value.problem}"


def test_a_question_built_directly_locates_its_problem_within_itself() -> None:
    with pytest.raises(InvalidQuestionError) as refused:
        Score(["low", ""])
    assert refused.value.loc == ("criteria", 1)
    assert str(refused.value).startswith("Score: expected level 1 to be a non-empty string")


def test_noul_criteria_as_one_text_are_this_clients_and_refused_where_only_the_api_shapes_count() -> None:
    text = {"type": "noul", "instructions": "Angry?", "criteria": "shouting counts"}
    assert isinstance(as_question("q", text), Noul)
    with pytest.raises(InvalidQuestionError) as refused:
        as_question("q", text, api_only=True)
    assert refused.value.loc == ("questions", "q", "criteria")
