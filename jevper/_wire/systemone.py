"""System One (``POST /v1/systemone``): build the request body, read and validate the response body.

One request carries every question of a call, in the API's own shape (``{"type", "instructions",
"criteria"}`` per question id). A response is read only when every answer follows the API: its type, a
distribution over exactly the question's options, the choice at the peak, the score at the expectation,
the legend naming the levels. ``violations`` lists what an answer gets wrong, one line each, so the probe
harness can grade a server with the same rules the client reads it by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jevper._wire import _read as r
from jevper._wire._answers import below_peak, checked, distribution, expectation, unit
from jevper._wire._read import brief, is_mapping
from jevper._wire.result import WireUsage
from jevper._wire.surface import NativeSurfaceRecord

SURFACE: Final = "systemone"
ROUTE: Final = "systemone"
RECORD = NativeSurfaceRecord(name=SURFACE, title="System One", route=ROUTE)


@dataclass(frozen=True)
class SystemOneResult:
    """A response body whose every answer follows the API, per question id in the order asked."""

    model: str | None  # as the server named it
    answers: Mapping[str, Mapping[str, Any]]
    usage: WireUsage
    raw: Mapping[str, Any]


def build(
    model: str, state: Any, questions: Mapping[str, Mapping[str, Any]], extra_body: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON body for POST /v1/systemone; the caller's extra_body is merged last, as given."""
    body: dict[str, Any] = {"model": model, "state": state, "questions": dict(questions)}
    body.update(extra_body)
    return body


def read(
    body: Mapping[str, Any], questions: Mapping[str, Mapping[str, Any]], *, model: str | None = None
) -> SystemOneResult:
    """Validate a 200 body against the questions asked (in the request's shape).

    Raises ProviderError for a 200 carrying an error, MalformedAnswerError naming what does not follow the
    API otherwise.
    """
    chat_apis = "api='chat_completions', 'responses' or 'messages'"
    expected = "answers that follow the System One API"
    checked(SURFACE, body, lambda got: body_violations(got, questions), expected, chat_apis, model=model)
    usage = body["usage"]
    answers = body["answers"]
    named = body.get("model")
    return SystemOneResult(
        model=named if isinstance(named, str) else None,
        answers={qid: answers[qid] for qid in questions},
        usage=WireUsage(usage.get("input_tokens"), usage.get("output_tokens"), None, None),
        raw=body,
    )


def body_violations(body: object, questions: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Everything a response body gets wrong against the questions asked; [] for a conforming body."""
    if not is_mapping(body):
        return [f"the body: expected an object, got {brief(body)}"]
    found: list[str] = []
    if "model" in body and (not isinstance(body["model"], str) or r.encodable(body["model"]) is None):
        found.append(f"model: expected a string that can be encoded as UTF-8, got {brief(body['model'])}")
    answers = body.get("answers")
    if not is_mapping(answers):
        found.append(f"answers: expected an object keyed by question id, got {brief(answers)}")
    else:
        missing = [qid for qid in questions if qid not in answers]
        extra = [qid for qid in answers if qid not in questions]
        if missing:
            found.append(f"answers: expected an answer to every question, got none for {missing!r:.120}")
        if extra:
            found.append(f"answers: expected only the questions asked, got also {extra!r:.120}")
        for qid, question in questions.items():
            if qid in answers:
                found += [f"answers[{qid!r}].{v}" for v in violations(answers[qid], question)]
    usage = body.get("usage")
    if not is_mapping(usage):
        found.append(f"usage: expected an object with input_tokens and output_tokens, got {brief(usage)}")
    else:
        for name in ("input_tokens", "output_tokens"):
            count = usage.get(name)
            if name not in usage or (
                count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0)
            ):
                got = brief(count) if name in usage else "nothing"
                found.append(f"usage.{name}: expected a non-negative integer or null, got {got}")
    return found


def violations(answer: object, question: Mapping[str, Any]) -> list[str]:
    """What one answer gets wrong against its question (in the request's shape); [] when it conforms.

    Each line names the field and says what was expected and what arrived.
    """
    kind = question.get("type")
    if not is_mapping(answer):
        return [f"answer: expected an object, got {brief(answer)}"]
    found: list[str] = []
    if answer.get("type") != kind:
        found.append(f"type: expected {kind!r}, got {brief(answer.get('type'))}")
    if kind == "choice":
        found += _choice(answer, list(question.get("criteria") or ()))
    elif kind == "score":
        found += _score(answer, list(question.get("criteria") or ()))
    elif kind == "noul":
        found += unit("noul", answer.get("noul"))
    else:
        found.append(f"question type: expected 'choice', 'noul' or 'score', got {kind!r}")
    return found


def _choice(answer: Mapping[str, Any], options: list[str]) -> list[str]:
    probabilities, found = _distribution(answer.get("probabilities"), options)
    choice = answer.get("choice")
    if choice not in options:
        found.append(f"choice: expected one of the options, got {brief(choice)}")
    elif probabilities is not None and below_peak(probabilities, choice):
        peak = max(probabilities, key=lambda option: probabilities[option])
        found.append(f"choice: expected the most probable option {peak!r}, got {choice!r}")
    return found + unit("confidence", answer.get("confidence"))


def _score(answer: Mapping[str, Any], levels: list[Any]) -> list[str]:
    keys = [str(i) for i in range(len(levels))]
    probabilities, found = _distribution(answer.get("probabilities"), keys)
    shares = None if probabilities is None else [probabilities[key] for key in keys]
    found += expectation(answer.get("score"), shares)
    legend = answer.get("legend")
    if not is_mapping(legend):
        found.append(f"legend: expected an object of level index to level, got {brief(legend)}")
    else:
        named = dict(zip(keys, levels, strict=True))
        if dict(legend) != named:
            found.append(f"legend: expected {named!r:.160}, got {dict(legend)!r:.160}")
    return found + unit("confidence", answer.get("confidence"))


def _distribution(value: object, keys: Sequence[str]) -> tuple[dict[str, float] | None, list[str]]:
    """The probabilities when they are a distribution over exactly ``keys``, and what is wrong otherwise."""
    if not is_mapping(value):
        return None, [f"probabilities: expected an object, got {brief(value)}"]
    if value.keys() != set(keys):
        missing = [k for k in keys if k not in value]
        extra = [k for k in value if k not in keys]
        return None, [
            f"probabilities: expected exactly the keys {list(keys)!r:.120}, "
            f"missing {missing!r:.80}, extra {extra!r:.80}"
        ]
    numbers, found = distribution([(f"probabilities[{k!r}]", value[k]) for k in keys])
    return (None if numbers is None else dict(zip(keys, numbers, strict=True))), found
