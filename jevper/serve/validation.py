"""A System One request, validated as the API defines it; every problem named by where it sits. A
Decisions request is read from JSON the same way, then checked by ``jevper.decisions`` (``decision``).

A problem is one entry of a 422's ``detail`` list, in the shape System One clients read:
``{"loc": ["body", "questions", "q", "criteria"], "msg": "...", "type": "value_error"}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jevper import InvalidQuestionError
from jevper.decisions import DecisionRequest, decision_request
from jevper.questions import Question, as_question
from jevper.serve.errors import Refusal


@dataclass(frozen=True)
class Problem:
    loc: tuple[str | int, ...]
    msg: str

    def to_json(self) -> dict[str, Any]:
        return {"loc": ["body", *self.loc], "msg": self.msg, "type": "value_error"}


class Invalid(ValueError):
    """A request the API refuses; ``problems`` name each field and what to change."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, p.loc)) or 'body'}: {p.msg}" for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class Asked:
    state: Any
    questions: dict[str, Question]
    images: bool  # the request carries images, which no upstream here reads


#: Arrays and objects within one another, the body itself counted: a state or a question nested deeper
#: would reach Python's recursion limit somewhere between here and the upstream request.
MAX_DEPTH = 64


def loaded(raw: bytes) -> Any:
    """The body's JSON value, or Invalid when it is not JSON (a Refusal, 400, when it is nested deeper
    than MAX_DEPTH): the same for every route."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise _too_deep("more") from None
    except ValueError as exc:
        raise Invalid([Problem((), f"expected a JSON object, got a body that is not JSON ({exc})")]) from None
    deepest = depth(body)
    if deepest > MAX_DEPTH:
        raise _too_deep(str(deepest))
    return body


def decision(raw: bytes) -> DecisionRequest:
    """A Decisions request, checked by ``jevper.decisions`` (InvalidDecisionError naming the param) once
    the body is JSON (as ``loaded`` says)."""
    return decision_request(loaded(raw))


def parse(raw: bytes) -> Asked:
    """The request's state and questions, or Invalid listing every problem found (a Refusal, 400, for
    a body nested deeper than MAX_DEPTH)."""
    body = loaded(raw)
    if not isinstance(body, Mapping):
        raise Invalid([Problem((), f"expected a JSON object, got {type(body).__name__}")])
    problems: list[Problem] = []
    if "state" not in body or body["state"] is None:
        problems.append(Problem(("state",), "field required: the text (or JSON value) to answer about"))
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        problems.append(Problem(("model",), f"expected a string, got {type(model).__name__}"))
    questions = body.get("questions")
    if not isinstance(questions, Mapping) or not questions:
        shown = "an empty object" if isinstance(questions, Mapping) else type(questions).__name__
        problems.append(
            Problem(("questions",), f"expected an object of 1 or more questions by id, got {shown}")
        )
        questions = {}
    parsed: dict[str, Question] = {}
    for qid, question in questions.items():
        # The questions' rules are jevper.questions' own; a refusal names where it sits.
        try:
            parsed[str(qid)] = as_question(str(qid), question, api_only=True)
        except InvalidQuestionError as exc:
            problems.append(Problem(exc.loc or ("questions", str(qid)), exc.problem))
    if problems:
        raise Invalid(problems)
    return Asked(body["state"], parsed, bool(body.get("images")) or bool(body.get("assets")))


def depth(value: Any) -> int:
    """How many arrays and objects ``value`` holds within one another (itself counted), found without
    recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def _too_deep(got: str) -> Refusal:
    return Refusal(
        400,
        "invalid_request_error",
        f"expected a JSON body nested at most {MAX_DEPTH} deep (arrays and objects within one another), "
        f"got {got} levels; send the state flatter, e.g. as text",
    )
