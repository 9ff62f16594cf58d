"""What the two native routes' readers share (System One's ``POST /v1/systemone`` and OpenAI's
``POST /v1/decisions``): a body read only when it follows the API, and the rules every answer of either
follows: a number in [0, 1], a distribution that sums to 1, a choice at the peak, a score at the
expectation over its levels. Each route says where its fields sit; the rules are stated once, here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard, TypeVar

from jevper._wire import _read as r
from jevper._wire._read import brief
from jevper._wire.errors import raise_embedded

K = TypeVar("K")

#: How far a sum, an expectation or a peak may sit from exact: float noise, not a different answer.
TOLERANCE = 1e-6


def checked(
    surface: str,
    body: Mapping[str, Any],
    violations: Callable[[Mapping[str, Any]], list[str]],
    expected: str,
    instead: str,
    *,
    model: str | None,
) -> None:
    """A 200 body that may be read: a ProviderError for one carrying an error instead of answers, a
    MalformedAnswerError quoting what ``violations`` finds wrong otherwise (``instead``: what to ask)."""
    r.mapping(surface, "the body", body)
    if "answers" not in body:
        raise_embedded(surface, body, model=model)
    found = violations(body)
    if found:
        raise r.violated(surface, expected, found, instead)


def distribution(listed: Sequence[tuple[str, object]]) -> tuple[list[float] | None, list[str]]:
    """The probabilities (each ``(where, value)``, ``where`` naming its field) when each is a number in
    [0, 1] and they sum to 1; else None and what is wrong."""
    found = [
        f"{where}: expected a number in [0, 1], got {brief(value)}"
        for where, value in listed
        if not unit_number(value)
    ]
    if found:
        return None, found
    numbers = [float(value) for _, value in listed if number(value)]
    total = sum(numbers)
    if abs(total - 1.0) > TOLERANCE:
        return None, [f"probabilities: expected a sum of 1, got {total!r}"]
    return numbers, []


def below_peak(shares: Mapping[K, float], chosen: K) -> bool:
    """Whether the option ``chosen`` is less probable than the most probable one (beyond noise)."""
    return shares[chosen] < max(shares.values()) - TOLERANCE


def expectation(score: object, shares: Sequence[float] | None) -> list[str]:
    """What is wrong with a score: not a number, or not the expected level index under ``shares`` (the
    levels' probabilities, lowest first; None when they could not be read)."""
    if not number(score):
        return [f"score: expected a number, got {brief(score)}"]
    if shares is None:
        return []
    expected = sum(i * p for i, p in enumerate(shares))
    if abs(score - expected) > TOLERANCE * max(1, len(shares)):
        return [f"score: expected the expected level index {expected:.6g}, got {score!r}"]
    return []


def unit(name: str, value: object) -> list[str]:
    return [] if unit_number(value) else [f"{name}: expected a number in [0, 1], got {brief(value)}"]


def count(value: object) -> bool:
    """A token count: a non-negative integer (a boolean is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def number(value: object) -> TypeGuard[int | float]:
    if type(value) is float:  # the common case first: a distribution is a dozen of these per answer
        return math.isfinite(value)
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def unit_number(value: object) -> bool:
    if type(value) is float or type(value) is int:  # NaN and infinities fail the comparison
        return -TOLERANCE <= value <= 1 + TOLERANCE
    return number(value) and -TOLERANCE <= value <= 1 + TOLERANCE
