"""Decisions bodies the fault server sends (POST /v1/decisions): a healthy ``Decision`` built from the
questions asked, and the broken ones.

A healthy answer puts half the mass on the first value or level, a quarter on the second and so on, as
System One's does (``systemone.halving``); a predicate answers ``HEALTHY_NOUL``, a question of a type the
API does not have a refusal. Each broken body is the healthy one with exactly one thing wrong, under the
same fault name as its prompt-surface analog.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from jevper._wire import decisions
from jevper.testing.bodies import BAD_UTF8_MARK, DUPLICATE_MARK
from jevper.testing.systemone import HEALTHY_NOUL, confidence, emptied, halving, invalid_utf8_model


class DecisionsAnswer:
    """The answers to the questions of one Decisions request, in order, before they are laid out."""

    surface = decisions.SURFACE

    def __init__(self, request: Any, model: str) -> None:
        self.model = model
        asked = request.get("questions") if isinstance(request, Mapping) else None
        listed = asked if isinstance(asked, list) else []
        self.answers: list[dict[str, Any]] = [_healthy(q) for q in listed if isinstance(q, Mapping)]

    def body(self) -> dict[str, Any]:
        inputs = 12 * len(self.answers)
        return {
            "answers": self.answers,
            "model": self.model,
            "usage": {
                "input_tokens": inputs,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": 0,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": inputs,
            },
        }


def _healthy(question: Mapping[str, Any]) -> dict[str, Any]:
    kind, name = question.get("type"), question.get("name")
    choices, levels = question.get("choices"), question.get("levels")
    if kind == "predicate":
        return {"type": "predicate", "name": name, "probability": HEALTHY_NOUL}
    if kind == "choice" and isinstance(choices, list) and choices:
        values = [c.get("value") if isinstance(c, Mapping) else None for c in choices]
        shares = halving(len(values))
        return {
            "type": "choice",
            "name": name,
            "choice": values[0],
            "confidence": confidence(shares),
            "probabilities": [{"value": v, "probability": p} for v, p in zip(values, shares, strict=True)],
        }
    if kind == "score" and isinstance(levels, list) and levels:
        labels = [level.get("label") if isinstance(level, Mapping) else None for level in levels]
        shares = halving(len(labels))
        return {
            "type": "score",
            "name": name,
            "score": sum(i * p for i, p in enumerate(shares)),
            "confidence": confidence(shares),
            "probabilities": [
                {"value": i, "label": label, "probability": p}
                for i, (label, p) in enumerate(zip(labels, shares, strict=True))
            ],
        }
    return {"type": "refusal", "name": name}


# --- one mutation per body fault ----------------------------------------------------------------------


def _first_distribution(a: DecisionsAnswer) -> list[dict[str, Any]] | None:
    """The probabilities of the first answer that lists them."""
    return next((answer["probabilities"] for answer in a.answers if "probabilities" in answer), None)


def _set_probability(value: float) -> Callable[[DecisionsAnswer], dict[str, Any]]:
    def body(a: DecisionsAnswer) -> dict[str, Any]:
        listed = _first_distribution(a)
        if listed:
            listed[0]["probability"] = value
        else:
            for answer in a.answers:
                answer["probability"] = value
        return a.body()

    return body


def _invalid_utf8_answer(a: DecisionsAnswer) -> dict[str, Any]:
    for answer in a.answers:
        answer["name"] = f"{answer['name'] or ''}{BAD_UTF8_MARK}"
    return a.body()


def _short(a: DecisionsAnswer) -> dict[str, Any]:
    listed = _first_distribution(a)
    if listed:
        listed.pop(0)
    elif a.answers:
        a.answers.pop(0)
    return a.body()


def _duplicate(a: DecisionsAnswer) -> dict[str, Any]:
    # A list cannot hold a key twice: the first value is listed twice instead.
    listed = _first_distribution(a)
    if listed:
        listed.append(dict(listed[0]))
    elif a.answers:
        a.answers[0][DUPLICATE_MARK + "probability"] = 0.1
    return a.body()


def _embedded_error(a: DecisionsAnswer) -> dict[str, Any]:
    return {
        "error": {"message": "upstream model crashed while deciding", "type": "server_error", "code": 500}
    }


DECISIONS_BODY_FAULTS: dict[str, Callable[[DecisionsAnswer], dict[str, Any]]] = {
    "invalid-utf8-content": _invalid_utf8_answer,
    "invalid-utf8-reasoning": invalid_utf8_model,
    "nan-logprob": _set_probability(math.nan),
    "infinity-logprob": _set_probability(math.inf),
    "positive-logprob": _set_probability(1.7),
    "short-logprobs": _short,
    "duplicate-alternatives": _duplicate,
    "empty-choices": emptied([]),
    "null-choices": emptied(None),
    "embedded-error": _embedded_error,
}
