"""Position bias: the same rows asked with a choice's options in other orders (rotations).

An unbiased model picks the same option whatever the order, and so picks each position equally often
over a full set of rotations. The figures: the share of answers under a rotation that differ from the
row's answer in the original order, the share of rows with any such change, and the share of all
answers at each position; and the same once each order's answers are divided by that order's mean
distribution (the label-free prior correction, fit on each order's own rows: no labels needed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jevper.evaluate._fit import divided, mean_prior
from jevper.evaluate._metrics import Distribution, predicted
from jevper.questions import rotated

__all__ = ["Asked", "PositionBias", "chosen", "position_bias", "rotated"]


@dataclass(frozen=True)
class Asked:
    """One answer: the options in the order they were shown, and the option chosen."""

    order: tuple[str, ...]
    chosen: str


@dataclass(frozen=True)
class PositionBias:
    rows: int
    rotated_answers: int
    changed: float
    rows_changed: float
    by_position: tuple[float, ...]
    #: the same figures after the prior correction of each order's answers
    prior_corrected: PositionBias | None = None

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "rows": self.rows,
            "rotated_answers": self.rotated_answers,
            "changed": self.changed,
            "rows_changed": self.rows_changed,
            "by_position": list(self.by_position),
        }
        if self.prior_corrected is not None:
            value["prior_corrected"] = self.prior_corrected.to_json()
        return value


def position_bias(rows: Mapping[str, Sequence[Asked]]) -> PositionBias | None:
    """``rows``: per row, its answer in the original order first, then its answers under rotations.
    None when no row was asked in more than one order."""
    asked = {rid: answers for rid, answers in rows.items() if len(answers) > 1}
    if not asked:
        return None
    width = len(next(iter(asked.values()))[0].order)
    positions = [0] * width
    total = changed = rows_changed = 0
    for answers in asked.values():
        first = answers[0].chosen
        moved = [a.chosen != first for a in answers[1:]]
        changed += sum(moved)
        rows_changed += any(moved)
        for a in answers:
            positions[a.order.index(a.chosen)] += 1
            total += 1
    rotated = total - len(asked)
    return PositionBias(
        len(asked),
        rotated,
        changed / rotated,
        rows_changed / len(asked),
        tuple(count / total for count in positions),
    )


def chosen(
    order: tuple[str, ...], distributions: Mapping[str, Distribution], *, corrected: bool = False
) -> dict[str, Asked]:
    """Each row's answer (its most probable option) in one order; ``corrected``: after dividing every
    distribution by their mean."""
    if corrected and distributions:
        prior = mean_prior(list(distributions.values()))
        distributions = {rid: divided(p, prior) for rid, p in distributions.items()}
    return {rid: Asked(order, order[predicted(p)]) for rid, p in distributions.items()}
