"""Which `confidence` a decision server means: its figure against the five formulas servers use
(../shared/decisions.md, "confidence means five things"), each computed from the answer's own
probabilities, per question type.

- TypeSafe's: a choice's `(p_max - 1/n) / (1 - 1/n)`, a score's `max(0, 1 - D / U)` (docs/systemone.md);
- the top probability, `p_max`;
- the top probability over the whole vocabulary: `p_max` times the label mass the answer reports
  (`label_mass`, `x_label_mass` or `diagnostics.label_mass`); not computable without it;
- one minus the normalised entropy, `1 - H(p) / ln n`;
- the top-two margin, `p_1 - p_2`.

A figure matches a formula when it is within `MATCH` of it: servers round (llama.cpp's README shows
four decimals), and half a unit in the third decimal still tells the five apart on any answer that is
not nearly uniform. A question type matches the formulas every one of its answers matches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

TYPESAFE, TOP, VOCABULARY, ENTROPY, MARGIN = (
    "TypeSafe's",
    "the top probability",
    "the top probability over the vocabulary",
    "1 - normalised entropy",
    "the top-two margin",
)
FORMULAS = (TYPESAFE, TOP, VOCABULARY, ENTROPY, MARGIN)
MATCH = 5e-4


def _typesafe(kind: str, shares: Sequence[float]) -> float:
    n = len(shares)
    if n < 2:
        return 1.0
    if kind == "score":
        peak = shares.index(max(shares))
        spread = sum(p * abs(i - peak) for i, p in enumerate(shares))
        uniform = sum(abs(i - (n - 1) / 2) for i in range(n)) / n
        return max(0.0, 1 - spread / uniform)
    return (max(shares) - 1 / n) / (1 - 1 / n)


def _entropy(shares: Sequence[float]) -> float:
    n = len(shares)
    if n < 2:
        return 1.0
    return 1 - -sum(p * math.log(p) for p in shares if p > 0) / math.log(n)


def _mass(answer: Mapping[str, Any]) -> float | None:
    diagnostics = answer.get("diagnostics")
    for value in (
        answer.get("label_mass"),
        answer.get("x_label_mass"),
        diagnostics.get("label_mass") if isinstance(diagnostics, Mapping) else None,
    ):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def candidates(kind: str, shares: Sequence[float], answer: Mapping[str, Any]) -> dict[str, float]:
    """Each formula's value for one answer (the vocabulary's only where the answer says its mass)."""
    ordered = sorted(shares, reverse=True)
    values = {
        TYPESAFE: _typesafe(kind, shares),
        TOP: ordered[0],
        ENTROPY: _entropy(shares),
        MARGIN: ordered[0] - (ordered[1] if len(ordered) > 1 else 0.0),
    }
    mass = _mass(answer)
    if mass is not None:
        values[VOCABULARY] = ordered[0] * mass
    return values


def shares_of(answer: Mapping[str, Any]) -> list[float] | None:
    """An answer's probabilities in option (or level) order: System One's object, Decisions' list."""
    listed = answer.get("probabilities")
    if isinstance(listed, Mapping):
        values = list(listed.values())
    elif isinstance(listed, list):
        values = [p.get("probability") if isinstance(p, Mapping) else None for p in listed]
    else:
        return None
    if not values or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return None
    return [float(v) for v in values]


def matches(answers: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Question type -> the formulas every answer of that type with a confidence matches (in FORMULAS'
    order; an empty list: none of the five)."""
    found: dict[str, set[str]] = {}
    for answer in answers:
        kind = answer.get("type")
        figure = answer.get("confidence")
        shares = shares_of(answer)
        if kind not in ("choice", "score") or shares is None:
            continue
        if not isinstance(figure, int | float) or isinstance(figure, bool):
            continue
        agree = {
            name
            for name, value in candidates(str(kind), shares, answer).items()
            if abs(value - figure) <= MATCH
        }
        found[str(kind)] = agree if str(kind) not in found else found[str(kind)] & agree
    return {kind: [f for f in FORMULAS if f in agree] for kind, agree in sorted(found.items())}


def describe(found: Mapping[str, Sequence[str]]) -> str:
    if not found:
        return "no answer carried a confidence with its probabilities"
    return "; ".join(
        f"{kind}: {' or '.join(names) if names else 'none of the five formulas'}"
        for kind, names in found.items()
    )
