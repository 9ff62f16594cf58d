"""From the model's own numbers per option to the public answer: rescale, pick, score, measure.

The one place a distribution is renormalised (``renormalised``) or a probability clamped (``clamped``):
the client, the calibration, the batch's review and the evaluation ask these.

The confidences are the System One API's (llama.cpp's server README reproduces both on its example);
before, jevper gave 1 minus the normalized entropy, which weighs the whole spread rather than the peak.
The evaluation's and the review's figure is another: a distribution's top probability.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from jevper._errors import MalformedAnswerError
from jevper.models import Answer, ChoiceAnswer, NoulAnswer, ScoreAnswer
from jevper.questions import Choice, Noul, Question


def renormalised(values: Sequence[float]) -> tuple[float, ...]:
    """``values`` divided by their sum. A ``ValueError`` when they are no distribution's weights: a value
    negative or not finite, or no mass at all (each caller says what that means in its own error)."""
    # The calibration maps renormalise every row of every fold: a finite positive sum and no negative
    # value is the one check a distribution's weights need on the way; anything else is looked at below.
    try:
        total = math.fsum(values)
    except (ValueError, OverflowError):
        total = math.nan
    if 0.0 < total < math.inf and min(values) >= 0:
        return tuple(x / total for x in values)
    if any(not (math.isfinite(x) and x >= 0) for x in values):
        raise ValueError(f"expected finite, non-negative numbers, got {list(values)}")
    total = math.fsum(values)
    if not total > 0:
        raise ValueError(f"expected numbers with a positive sum, got {list(values)}")
    return tuple(x / total for x in values)


def clamped(value: float, low: float = 0.0, high: float = 1.0) -> float:
    """``value`` held within [low, high] (a probability by default)."""
    return max(low, min(high, float(value)))


def top_probability(p: Sequence[float]) -> float:
    """A distribution's top probability: what the evaluation bins and ``--review-below`` compares (not
    the APIs' ``confidence``, ``choice_confidence``, which rescales it)."""
    return max(p)


def rescaled(raw: dict[str, float]) -> dict[str, float]:
    try:
        return dict(zip(raw, renormalised(list(raw.values())), strict=True))
    except ValueError:
        raise MalformedAnswerError(
            f"expected some probability mass on the options, got {raw}; use method='structured'"
        ) from None


def choice_confidence(probabilities: Sequence[float]) -> float:
    """``(p_max - 1/n) / (1 - 1/n)``: 0 when every option is equally likely, 1 when one holds all the mass
    (and 1 for a single option)."""
    n = len(probabilities)
    if n < 2:
        return 1.0
    return clamped((max(probabilities) - 1 / n) / (1 - 1 / n))


def score_confidence(probabilities: Sequence[float]) -> float:
    """``max(0, 1 - D / U)`` over levels 0..n-1: D is the expected distance from the most probable level,
    U the same distance for a uniform answer over the n levels (1 for a single level)."""
    n = len(probabilities)
    if n < 2:
        return 1.0
    peak = max(range(n), key=lambda i: probabilities[i])
    spread = sum(p * abs(i - peak) for i, p in enumerate(probabilities))
    uniform = sum(abs(i - (n - 1) / 2) for i in range(n)) / n
    return clamped(1 - spread / uniform)


def make_answer(
    question: Question,
    raw: dict[str, float],
    *,
    normalize: bool,
    method: str,
    surface: str,
    reasoning: str | None,
) -> Answer:
    """The answer; with ``normalize=False`` the probabilities are the model's own numbers, while the
    pick, the score and the confidence always come from the rescaled distribution."""
    dist = rescaled(raw)
    shown = dist if normalize else dict(raw)
    if isinstance(question, Choice):
        best = max(dist, key=lambda option: dist[option])
        return ChoiceAnswer(best, shown, choice_confidence(list(dist.values())), method, surface, reasoning)
    if isinstance(question, Noul):
        return NoulAnswer(
            dist["yes"], shown, choice_confidence(list(dist.values())), method, surface, reasoning
        )
    by_level = {int(option): value for option, value in shown.items()}
    levels = [dist[option] for option in question.options]
    score = sum(i * p for i, p in enumerate(levels))
    legend = dict(enumerate(question.criteria))
    return ScoreAnswer(score, by_level, legend, score_confidence(levels), method, surface, reasoning)
