"""A confidence threshold with a guarantee: with probability at least ``1 - risk`` over the labelled sample,
the answers whose top probability is at or above it are right at least ``target`` of the time.

The method is Learn-then-Test (Angelopoulos, Bates, Candès, Jordan and Lei, 2021) with fixed-sequence
testing. Each candidate threshold ``t`` of a grid fixed in advance (1.00, 0.99, ..., 0.00) is one null
hypothesis, "the answers at or above t are right less than ``target`` of the time", tested by the exact
one-sided binomial test: with ``k`` of the ``n`` labelled answers at or above ``t`` right, its p-value is
``P[Binomial(n, target) >= k]``, at most ``risk`` exactly when the one-sided Clopper-Pearson lower bound
of their accuracy, at level ``1 - risk``, is at least ``target``. The candidates are tested from strict to
loose, each at the full ``risk``, stopping at the first that is not rejected; the threshold is the
loosest rejected. Fixed-sequence testing controls the family-wise error at ``risk`` without splitting it
between the candidates (a Bonferroni split over 101 candidates would test each at ``risk / 101``, and
choose stricter thresholds for the same guarantee), because a wrong rejection can only happen at the first
true null of the sequence, which is tested once at ``risk``.

The sequence starts at the strictest candidate with answers enough that it could pass: where, were they
right ``(1 + target) / 2`` of the time (halfway between the target and always), the test would reject.
Started at the very strictest, a sequence on a few hundred rows mostly ends at its first candidate, whose
handful of answers cannot show the target whatever they are; which candidates are passed over depends on
the top probabilities alone, never on the labels, so the order is still fixed before the labels are
looked at. Where no candidate is rejected, there is no threshold: every answer goes to review.

Per label, the same on the answers whose top option is that label: each label's guarantee holds for it
at ``1 - risk``; for all labels at once, give ``risk`` divided by their number.

The binomial tail is summed exactly (``math.lgamma`` terms, the shorter side of the distribution), with no
dependency beyond the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jevper._distribution import top_probability
from jevper.evaluate._metrics import Distribution, predicted

#: The candidate thresholds, strict to loose, fixed before any label is seen.
CANDIDATES: tuple[float, ...] = tuple(round(1 - i / 100, 2) for i in range(101))
METHOD = (
    "Learn-then-Test: fixed-sequence testing over the thresholds 1.00, 0.99, ..., 0.00 (strict to loose), "
    "each by the exact one-sided binomial test (Clopper-Pearson), at the full risk"
)


def binomial_tail(k: int, n: int, p: float) -> float:
    """``P[X >= k]`` for ``X ~ Binomial(n, p)``, summed exactly over the shorter side."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    if k >= n * p:
        return min(1.0, math.fsum(_term(i, n, p) for i in range(k, n + 1)))
    return max(0.0, 1.0 - math.fsum(_term(i, n, p) for i in range(k)))


def _term(i: int, n: int, p: float) -> float:
    log = math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
    return math.exp(log + i * math.log(p) + (n - i) * math.log1p(-p))


def lower_bound(k: int, n: int, risk: float) -> float:
    """The one-sided Clopper-Pearson lower bound, at level ``1 - risk``, of a success rate seen as ``k``
    of ``n``: the p at which ``P[Binomial(n, p) >= k] = risk`` (0 for k = 0)."""
    if k <= 0:
        return 0.0
    if k >= n:
        return float(risk ** (1 / n))
    low, high = 0.0, k / n
    for _ in range(60):  # bisection: the tail grows with p; 60 halvings reach a float's precision
        middle = (low + high) / 2
        if binomial_tail(k, n, middle) < risk:
            low = middle
        else:
            high = middle
    return low


def p_value(k: int, n: int, target: float) -> float:
    """The exact p-value of "the accuracy is below ``target``", seen ``k`` right of ``n``."""
    return binomial_tail(k, n, target) if n else 1.0


def testable(n: int, target: float, risk: float) -> bool:
    """Whether ``n`` answers are enough to start the sequence: right ``(1 + target) / 2`` of the time, they
    would show ``target`` (never, for a target of 1)."""
    return n > 0 and p_value(math.ceil(n * (1 + target) / 2 - 1e-9), n, target) <= risk


@dataclass(frozen=True)
class Chosen:
    """One guaranteed threshold: the answers at or above it (``kept`` of ``rows``), how many of them were
    right, and their accuracy's lower bound; ``threshold`` None when no candidate met the target."""

    threshold: float | None
    rows: int
    kept: int
    right: int
    lower_bound: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "rows": self.rows,
            "kept": self.kept,
            "coverage": self.kept / self.rows if self.rows else 0.0,
            "accuracy": self.right / self.kept if self.kept else None,
            "lower_bound": self.lower_bound,
        }


def choose_threshold(tops: Sequence[float], hits: Sequence[bool], target: float, risk: float) -> Chosen:
    """The loosest candidate the fixed sequence rejects "accuracy below ``target``" at, for answers with
    these top probabilities, right where ``hits``; no threshold when the first testable one is not."""
    if not 0 < target <= 1:
        raise ValueError(f"target: expected an accuracy in (0, 1], got {target}")
    if not 0 < risk < 1:
        raise ValueError(f"risk: expected a probability in (0, 1), got {risk}")
    ranked = sorted(zip(tops, hits, strict=True), key=lambda pair: -pair[0])
    found: tuple[float, int, int] | None = None
    kept = right = 0
    for threshold in CANDIDATES:
        while kept < len(ranked) and ranked[kept][0] >= threshold:
            right += ranked[kept][1]
            kept += 1
        if not testable(kept, target, risk):
            continue  # too few answers to start the sequence
        if p_value(right, kept, target) > risk:
            break
        found = (threshold, kept, right)
    if found is None:
        return Chosen(None, len(ranked), 0, 0, None)
    threshold, kept, right = found
    return Chosen(threshold, len(ranked), kept, right, lower_bound(right, kept, risk))


@dataclass(frozen=True)
class Guarantee:
    """One question's guaranteed thresholds: over all its answers, and per label (``labels``, when asked
    for), with the target and risk they were chosen for and the figure they apply to (``on``)."""

    target: float
    risk: float
    on: str
    question: Chosen
    labels: Mapping[str, Chosen] | None = None

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "target_accuracy": self.target,
            "risk": self.risk,
            "method": METHOD,
            "on": self.on,
            **self.question.to_json(),
        }
        if self.labels is not None:
            value["per_label"] = {label: chosen.to_json() for label, chosen in self.labels.items()}
        return value


def guarantee(
    options: Sequence[str],
    probabilities: Sequence[Distribution],
    gold: Sequence[int],
    target: float,
    risk: float,
    *,
    on: str,
    per_label: bool = False,
) -> Guarantee:
    """A question's thresholds from its labelled answers (distributions in ``options`` order, gold
    indices); ``per_label``: also one per label, on the answers whose top option it is."""
    tops = [top_probability(p) for p in probabilities]
    picks = [predicted(p) for p in probabilities]
    hits = [pick == g for pick, g in zip(picks, gold, strict=True)]
    labels = None
    if per_label:
        labels = {
            option: choose_threshold(
                [t for t, pick in zip(tops, picks, strict=True) if pick == i],
                [h for h, pick in zip(hits, picks, strict=True) if pick == i],
                target,
                risk,
            )
            for i, option in enumerate(options)
        }
    return Guarantee(target, risk, on, choose_threshold(tops, hits, target, risk), labels)
