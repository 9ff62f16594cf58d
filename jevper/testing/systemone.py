"""System One bodies the fault server sends: a healthy answer to every question asked, and the broken ones.

A healthy answer puts half the mass on the first option, a quarter on the second and so on (the rest on
the last), the way a healthy label answer favours A; each broken body is the healthy one with exactly one
thing wrong, under the same fault name as its prompt-surface analog.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from jevper._wire import systemone
from jevper.testing.bodies import BAD_UTF8_MARK, DUPLICATE_MARK

#: The probability of yes in a healthy noul answer.
HEALTHY_NOUL = 0.7


def halving(n: int) -> list[float]:
    """1/2, 1/4, ... over n options, the last taking what is left: a distribution with one clear peak."""
    shares = [0.5 ** (i + 1) for i in range(n - 1)]
    return [*shares, 1.0 - sum(shares)]


def confidence(probabilities: list[float]) -> float:
    """How far the peak stands above a uniform guess: 0 for uniform, 1 for certain."""
    n = len(probabilities)
    return 1.0 if n < 2 else (max(probabilities) - 1 / n) / (1 - 1 / n)


class NativeAnswer(Protocol):
    """The answers to one request on a native surface (System One or Decisions), laid out by ``body``."""

    model: str

    def body(self) -> dict[str, Any]: ...


class SystemOneAnswer:
    """The answers to the questions of one request, before they are laid out as a body."""

    surface = systemone.SURFACE

    def __init__(self, request: Any, model: str) -> None:
        self.model = model
        asked = request.get("questions") if isinstance(request, Mapping) else None
        self.answers: dict[str, dict[str, Any]] = {}
        for qid, question in (asked or {}).items() if isinstance(asked, Mapping) else ():
            if isinstance(question, Mapping):
                self.answers[str(qid)] = _healthy(question)

    def body(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "answers": self.answers,
            "usage": {"input_tokens": 12 * len(self.answers), "output_tokens": 0},
        }


def _healthy(question: Mapping[str, Any]) -> dict[str, Any]:
    kind = question.get("type")
    criteria = question.get("criteria")
    if kind == "choice" and isinstance(criteria, Mapping) and criteria:
        shares = halving(len(criteria))
        probabilities = dict(zip(map(str, criteria), shares, strict=True))
        choice = next(iter(probabilities))
        return {
            "type": "choice",
            "choice": choice,
            "probabilities": probabilities,
            "confidence": confidence(shares),
        }
    if kind == "score" and isinstance(criteria, list) and criteria:
        shares = halving(len(criteria))
        return {
            "type": "score",
            "score": sum(i * p for i, p in enumerate(shares)),
            "legend": {str(i): level for i, level in enumerate(criteria)},
            "probabilities": {str(i): p for i, p in enumerate(shares)},
            "confidence": _score_confidence(shares),
        }
    return {"type": "noul", "noul": HEALTHY_NOUL}


def _score_confidence(shares: list[float]) -> float:
    n = len(shares)
    if n < 2:
        return 1.0
    peak = shares.index(max(shares))
    spread = sum(p * abs(i - peak) for i, p in enumerate(shares))
    uniform = sum(abs(i - (n - 1) / 2) for i in range(n)) / n
    return max(0.0, 1 - spread / uniform)


# --- one mutation per body fault ----------------------------------------------------------------------


def _first_distribution(a: SystemOneAnswer) -> dict[str, Any] | None:
    """The probabilities of the first answer that has them."""
    return next((ans["probabilities"] for ans in a.answers.values() if "probabilities" in ans), None)


def _set_probability(value: float) -> Callable[[SystemOneAnswer], dict[str, Any]]:
    def body(a: SystemOneAnswer) -> dict[str, Any]:
        probabilities = _first_distribution(a)
        if probabilities is not None:
            probabilities[next(iter(probabilities))] = value
        else:
            for answer in a.answers.values():
                answer["noul"] = value
        return a.body()

    return body


def _invalid_utf8_answer(a: SystemOneAnswer) -> dict[str, Any]:
    for answer in a.answers.values():
        answer["note"] = BAD_UTF8_MARK
    return a.body()


def invalid_utf8_model(a: NativeAnswer) -> dict[str, Any]:
    # A native surface has no trace: its other free text is the model's name.
    a.model = a.model + BAD_UTF8_MARK
    return a.body()


def _short(a: SystemOneAnswer) -> dict[str, Any]:
    probabilities = _first_distribution(a)
    if probabilities is not None:
        probabilities.pop(next(iter(probabilities)))
    elif a.answers:
        a.answers.pop(next(iter(a.answers)))
    return a.body()


def _duplicate(a: SystemOneAnswer) -> dict[str, Any]:
    probabilities = _first_distribution(a)
    if probabilities is not None:
        first = next(iter(probabilities))
        probabilities[DUPLICATE_MARK + first] = 0.9
    return a.body()


def emptied(value: Any) -> Callable[[NativeAnswer], dict[str, Any]]:
    """The healthy body with its answers replaced by ``value``."""

    def body(a: NativeAnswer) -> dict[str, Any]:
        out = a.body()
        out["answers"] = value
        return out

    return body


def _embedded_error(a: SystemOneAnswer) -> dict[str, Any]:
    return {"error": {"message": "upstream model crashed while scoring", "type": "server_error", "code": 500}}


SYSTEMONE_BODY_FAULTS: dict[str, Callable[[SystemOneAnswer], dict[str, Any]]] = {
    "invalid-utf8-content": _invalid_utf8_answer,
    "invalid-utf8-reasoning": invalid_utf8_model,
    "nan-logprob": _set_probability(math.nan),
    "infinity-logprob": _set_probability(math.inf),
    "positive-logprob": _set_probability(1.7),
    "short-logprobs": _short,
    "duplicate-alternatives": _duplicate,
    "empty-choices": emptied({}),
    "null-choices": emptied(None),
    "embedded-error": _embedded_error,
}
