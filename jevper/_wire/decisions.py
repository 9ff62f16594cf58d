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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from jevper._wire._answers import below_peak, checked, count, distribution, expectation, unit
from jevper._wire._read import brief, is_mapping

SURFACE: Final = "decisions"
ROUTE: Final = "decisions"
#: The route's name as a type, for the client's ``api`` option.
DecisionsRoute = Literal["decisions"]
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
    expected = "a body that follows OpenAI's Decision schema"
    checked(SURFACE, body, lambda got: body_violations(got, questions), expected, "api='auto'", model=model)
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
        found += unit("probability", answer.get("probability"))
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
            numbers, problems = distribution(_probabilities(listed))
            found += problems
            shares = dict(zip(keys, numbers, strict=True)) if numbers is not None else None
    choice = answer.get("choice")
    if _typed(choice) not in [_typed(value) for value in values]:
        found.append(f"choice: expected one of the values (typed), got {brief(choice)}")
    elif shares is not None and below_peak(shares, _typed(choice)):
        found.append(f"choice: expected the most probable value, got {choice!r}")
    return found + unit("confidence", answer.get("confidence"))


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
        shares, problems = distribution(_probabilities(listed))
        found += problems
    found += expectation(answer.get("score"), shares)
    return found + unit("confidence", answer.get("confidence"))


def _probabilities(listed: list[Mapping[str, Any]]) -> list[tuple[str, object]]:
    """Each listed probability, and where it sits."""
    return [(f"probabilities[{i}].probability", item.get("probability")) for i, item in enumerate(listed)]


def _usage(usage: object) -> list[str]:
    if not is_mapping(usage):
        return [f"usage: expected an object of token counts, got {brief(usage)}"]
    found = [
        f"usage.{name}: expected a non-negative integer, got {brief(usage.get(name))}"
        for name in ("input_tokens", "output_tokens", "total_tokens")
        if not count(usage.get(name))
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
            if not count(part.get(name))
        ]
    return found


def _typed(value: object) -> tuple[bool, object]:
    """A choice value with its type: ``True`` and ``"true"`` (and 1) are different values."""
    return (isinstance(value, bool), value)
