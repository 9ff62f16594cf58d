"""OpenAI's Decisions API (``POST /v1/decisions``): build the request body, read and validate the response.

One request carries every question of a call, in a list; the answers come back in the same order, each a
``predicate``, ``choice``, ``score`` or ``refusal`` (a refusal costs only its own question). A response is
read only when it follows the schema of the ``openai`` SDK's ``Decision`` and fits the questions asked:
the answers match them in number, order, type and name, each distribution covers exactly the question's
values (a string and a boolean being distinct) and sums to 1, a choice sits at the peak and a score at the
expectation over its levels. ``violations`` lists what an answer gets wrong, one line each, so the probe
harness can grade a server by the rules the client reads it by.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeGuard

from jevper._wire import _read as r
from jevper._wire._read import brief, is_mapping
from jevper._wire.errors import raise_embedded

SURFACE: Final = "decisions"
ROUTE: Final = "decisions"
#: The route's name as a type, for the client's ``api`` option.
DecisionsRoute = Literal["decisions"]
#: How far a sum, an expectation or a peak may sit from exact: float noise, not a different answer.
TOLERANCE = 1e-6
ANSWER_TYPES = ("predicate", "choice", "score", "refusal")


@dataclass(frozen=True)
class DecisionsResult:
    """A response body whose every answer follows the schema, in question order."""

    model: str
    answers: tuple[Mapping[str, Any], ...]
    usage: Mapping[str, Any]
    raw: Mapping[str, Any]


def build(request: Mapping[str, Any], extra_body: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body for POST /v1/decisions: the request as validated; the caller's extra_body last."""
    body = dict(request)
    body.update(extra_body)
    return body


def read(
    body: Mapping[str, Any], questions: Sequence[Mapping[str, Any]], *, model: str | None = None
) -> DecisionsResult:
    """Validate a 200 body against the questions asked (in the request's shape).

    Raises ProviderError for a 200 carrying an error, MalformedAnswerError naming what does not follow the
    schema otherwise.
    """
    r.mapping(SURFACE, "the body", body)
    if "answers" not in body:
        raise_embedded(SURFACE, body, model=model)
    found = body_violations(body, questions)
    if found:
        raise r.violated(SURFACE, "a body that follows OpenAI's Decision schema", found, "api='auto'")
    return DecisionsResult(str(body["model"]), tuple(body["answers"]), body["usage"], body)


def body_violations(body: object, questions: Sequence[Mapping[str, Any]]) -> list[str]:
    """Everything a response body gets wrong against the questions asked; [] for a conforming body."""
    if not is_mapping(body):
        return [f"the body: expected an object, got {brief(body)}"]
    found: list[str] = []
    if not isinstance(body.get("model"), str):
        found.append(f"model: expected a string, got {brief(body.get('model'))}")
    answers = body.get("answers")
    if not isinstance(answers, list):
        found.append(f"answers: expected a list in question order, got {brief(answers)}")
    elif len(answers) != len(questions):
        found.append(f"answers: expected {len(questions)} answer(s), one per question, got {len(answers)}")
    else:
        for i, (answer, question) in enumerate(zip(answers, questions, strict=True)):
            found += [f"answers[{i}].{v}" for v in violations(answer, question)]
    found += _usage(body.get("usage"))
    return found


def violations(answer: object, question: Mapping[str, Any]) -> list[str]:
    """What one answer gets wrong against its question (in the request's shape); [] when it conforms."""
    if not is_mapping(answer):
        return [f"answer: expected an object, got {brief(answer)}"]
    kind, given = question.get("type"), answer.get("type")
    found: list[str] = []
    if given not in (kind, "refusal"):
        found.append(f"type: expected {kind!r} or 'refusal', got {brief(given)}")
        return found
    name = question.get("name")
    if answer.get("name") != name:
        found.append(f"name: expected {name!r} (the question's), got {brief(answer.get('name'))}")
    if given == "predicate":
        found += _unit("probability", answer.get("probability"))
    elif given == "choice":
        values = [c.get("value") for c in question.get("choices") or () if is_mapping(c)]
        found += _choice(answer, values)
    elif given == "score":
        labels = [level.get("label") for level in question.get("levels") or () if is_mapping(level)]
        found += _score(answer, labels)
    return found


def _choice(answer: Mapping[str, Any], values: list[Any]) -> list[str]:
    found: list[str] = []
    listed = answer.get("probabilities")
    shares: dict[tuple[bool, Any], float] | None = None
    if not isinstance(listed, list) or not all(is_mapping(item) for item in listed):
        found.append(f"probabilities: expected a list of {{value, probability}}, got {brief(listed)}")
    else:
        keys = [_typed(item.get("value")) for item in listed]
        wanted = [_typed(value) for value in values]
        if sorted(keys, key=repr) != sorted(wanted, key=repr):
            found.append(
                f"probabilities: expected each of the values {values!r:.120} once, got "
                f"{[item.get('value') for item in listed]!r:.120}"
            )
        else:
            numbers, problems = _distribution([item.get("probability") for item in listed])
            found += problems
            shares = dict(zip(keys, numbers, strict=True)) if numbers is not None else None
    choice = answer.get("choice")
    if _typed(choice) not in [_typed(value) for value in values]:
        found.append(f"choice: expected one of the values (typed), got {brief(choice)}")
    elif shares is not None and shares[_typed(choice)] < max(shares.values()) - TOLERANCE:
        found.append(f"choice: expected the most probable value, got {choice!r}")
    return found + _unit("confidence", answer.get("confidence"))


def _score(answer: Mapping[str, Any], labels: list[Any]) -> list[str]:
    found: list[str] = []
    listed = answer.get("probabilities")
    shares: list[float] | None = None
    if not isinstance(listed, list) or not all(is_mapping(item) for item in listed):
        found.append(f"probabilities: expected a list of {{value, label, probability}}, got {brief(listed)}")
    elif [item.get("value") for item in listed] != list(range(len(labels))):
        found.append(
            f"probabilities: expected the level indices 0 to {len(labels) - 1} in order, got "
            f"{[item.get('value') for item in listed]!r:.120}"
        )
    else:
        named = [item.get("label") for item in listed]
        if named != labels:
            found.append(f"probabilities: expected the labels {labels!r:.120}, got {named!r:.120}")
        shares, problems = _distribution([item.get("probability") for item in listed])
        found += problems
    score = answer.get("score")
    if not _number(score):
        found.append(f"score: expected a number, got {brief(score)}")
    elif shares is not None:
        expected = sum(i * p for i, p in enumerate(shares))
        if abs(score - expected) > TOLERANCE * max(1, len(labels)):
            found.append(f"score: expected the expected level index {expected:.6g}, got {score!r}")
    return found + _unit("confidence", answer.get("confidence"))


def _distribution(values: list[Any]) -> tuple[list[float] | None, list[str]]:
    found = [
        f"probabilities[{i}].probability: expected a number in [0, 1], got {brief(value)}"
        for i, value in enumerate(values)
        if not _unit_number(value)
    ]
    if found:
        return None, found
    total = sum(values)
    if abs(total - 1.0) > TOLERANCE:
        return None, [f"probabilities: expected a sum of 1, got {total!r}"]
    return [float(value) for value in values], []


def _usage(usage: object) -> list[str]:
    if not is_mapping(usage):
        return [f"usage: expected an object of token counts, got {brief(usage)}"]
    found = [
        f"usage.{name}: expected a non-negative integer, got {brief(usage.get(name))}"
        for name in ("input_tokens", "output_tokens", "total_tokens")
        if not _count(usage.get(name))
    ]
    for details, names in (
        ("input_tokens_details", ("cached_tokens", "cache_write_tokens")),
        ("output_tokens_details", ("reasoning_tokens",)),
    ):
        part = usage.get(details)
        if not is_mapping(part):
            found.append(f"usage.{details}: expected an object, got {brief(part)}")
            continue
        found += [
            f"usage.{details}.{name}: expected a non-negative integer, got {brief(part.get(name))}"
            for name in names
            if not _count(part.get(name))
        ]
    return found


def _typed(value: object) -> tuple[bool, object]:
    """A choice value with its type: ``True`` and ``"true"`` (and 1) are different values."""
    return (isinstance(value, bool), value)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _unit(name: str, value: object) -> list[str]:
    return [] if _unit_number(value) else [f"{name}: expected a number in [0, 1], got {brief(value)}"]


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _unit_number(value: object) -> bool:
    return _number(value) and -TOLERANCE <= value <= 1 + TOLERANCE
