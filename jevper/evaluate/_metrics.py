"""The figures of one question, from each row's distribution over the options and its gold option.

A distribution is a tuple of probabilities in the question's option order; gold is an option's index.
The predicted option is the most probable (the first of equal ones, as the answer's ``choice``); the
figures bin and threshold its top probability (``_distribution.top_probability``), not the System One
API's ``confidence``, which rescales it.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from jevper._distribution import top_probability
from jevper.calibration import FLOOR as FLOOR  # re-exported for the evaluation's modules
from jevper.calibration import Distribution as Distribution

ECE_BINS = 15
Binning = Literal["equal_width", "equal_mass"]


def predicted(p: Distribution) -> int:
    """The most probable option's index; the first of equal ones."""
    return max(range(len(p)), key=lambda i: (p[i], -i))


def correct(probabilities: Sequence[Distribution], gold: Sequence[int]) -> list[bool]:
    return [predicted(p) == g for p, g in zip(probabilities, gold, strict=True)]


def accuracy(probabilities: Sequence[Distribution], gold: Sequence[int]) -> float:
    hits = correct(probabilities, gold)
    return sum(hits) / len(hits) if hits else math.nan


def brier(probabilities: Sequence[Distribution], gold: Sequence[int]) -> float:
    """The multi-class Brier score (Brier 1950): the mean over rows of the sum over options of
    ``(p - 1[option is gold])**2``, from 0 to 2; a yes/no question's is twice ``(p_true - y)**2``."""
    total = 0.0
    for p, g in zip(probabilities, gold, strict=True):
        total += sum((q - (1.0 if i == g else 0.0)) ** 2 for i, q in enumerate(p))
    return total / len(gold) if gold else math.nan


def nll(probabilities: Sequence[Distribution], gold: Sequence[int]) -> float:
    """The mean negative log-likelihood of the gold option, in nats (its probability floored at FLOOR)."""
    total = sum(-math.log(max(p[g], FLOOR)) for p, g in zip(probabilities, gold, strict=True))
    return total / len(gold) if gold else math.nan


def expected_level_mae(probabilities: Sequence[Distribution], gold: Sequence[int]) -> float:
    """For a Score: the mean absolute distance between the expected level and the gold level."""
    total = 0.0
    for p, g in zip(probabilities, gold, strict=True):
        total += abs(sum(i * q for i, q in enumerate(p)) - g)
    return total / len(gold) if gold else math.nan


@dataclass(frozen=True)
class Bin:
    """One bin of top probabilities: its edges (``lower`` excluded, ``upper`` included; the first holds
    0), its rows, their mean top probability and their accuracy (None when empty)."""

    lower: float
    upper: float
    count: int
    top_probability: float | None
    accuracy: float | None


@dataclass(frozen=True)
class Reliability:
    """Top-label calibration: the bins, how they were cut, and the expected calibration error (the
    row-weighted mean of |accuracy - top probability| over the bins)."""

    binning: Binning
    bins: tuple[Bin, ...]
    ece: float


def equal_width_edges(bins: int = ECE_BINS) -> list[float]:
    step = 1.0 / bins
    return [i * step for i in range(bins)] + [1.0]


def equal_mass_edges(tops: Sequence[float], bins: int = ECE_BINS) -> list[float]:
    """Edges at the quantiles of the top probabilities (linear between order statistics), so each bin
    holds about as many rows; equal top probabilities may leave some bins empty."""
    ordered = sorted(tops)
    return [_quantile(ordered, i / bins) for i in range(bins)] + [ordered[-1]]


def _quantile(ordered: Sequence[float], q: float) -> float:
    at = q * (len(ordered) - 1)
    below = math.floor(at)
    above = min(below + 1, len(ordered) - 1)
    t = at - below
    a, b = ordered[below], ordered[above]
    # Interpolated from the nearer end, so an edge equal to a row's value is that value exactly.
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t)


def reliability(
    probabilities: Sequence[Distribution], gold: Sequence[int], binning: Binning = "equal_width"
) -> Reliability:
    """The reliability bins of the top label: each row falls in the bin whose upper edge is the first
    at or above its top probability."""
    tops = [top_probability(p) for p in probabilities]
    hits = correct(probabilities, gold)
    if not tops:
        return Reliability(binning, (), math.nan)
    edges = equal_width_edges() if binning == "equal_width" else equal_mass_edges(tops)
    inner = edges[1:-1]
    counts = [0] * (len(edges) - 1)
    top_sums = [0.0] * len(counts)
    hit_sums = [0] * len(counts)
    for top, hit in zip(tops, hits, strict=True):
        at = bisect_left(inner, top)
        counts[at] += 1
        top_sums[at] += top
        hit_sums[at] += hit
    bins = tuple(
        Bin(
            edges[i],
            edges[i + 1],
            counts[i],
            top_sums[i] / counts[i] if counts[i] else None,
            hit_sums[i] / counts[i] if counts[i] else None,
        )
        for i in range(len(counts))
    )
    n = len(tops)
    ece = sum(abs(hit_sums[i] - top_sums[i]) / n for i in range(len(counts)))
    return Reliability(binning, bins, ece)


@dataclass(frozen=True)
class Point:
    """Rows whose top probability is at least ``threshold``: the share of rows kept and their accuracy."""

    threshold: float
    coverage: float
    accuracy: float | None


@dataclass(frozen=True)
class Selective:
    """Selective accuracy: the curve at thresholds 0, 0.01, ..., 1, and the smallest threshold
    at which the rows kept reach ``target`` accuracy (None when no threshold does)."""

    target: float
    curve: tuple[Point, ...]
    reached: Point | None


def selective(probabilities: Sequence[Distribution], gold: Sequence[int], target: float = 0.9) -> Selective:
    tops = [top_probability(p) for p in probabilities]
    hits = correct(probabilities, gold)
    n = len(tops)
    # Rows by top probability, highest first: the rows kept at a threshold are a prefix of them.
    order = sorted(range(n), key=lambda i: -tops[i])
    ranked = [tops[i] for i in order]
    right = [0]
    for i in order:
        right.append(right[-1] + hits[i])

    def kept(count: int, threshold: float) -> Point:
        return Point(threshold, count / n if n else 0.0, right[count] / count if count else None)

    # With the top probabilities negated and ascending, the rows at or above t are those before -t's
    # upper end.
    negated = [-c for c in ranked]
    curve = tuple(kept(bisect_right(negated, -step / 100), step / 100) for step in range(101))
    reached = None
    # Each distinct top probability is a threshold; the lowest at which the rows kept reach the target wins.
    for count in range(n, 0, -1):
        if count < n and ranked[count] == ranked[count - 1]:
            continue  # not the end of a run of equal top probabilities
        if right[count] / count >= target:
            reached = kept(count, ranked[count - 1])
            break
    return Selective(target, curve, reached)
