"""From the model's own numbers per option to the public answer: rescale, pick, score, measure."""

from __future__ import annotations

import math

from jevper._errors import MalformedAnswerError
from jevper.models import Answer, ChoiceAnswer, NoulAnswer, ScoreAnswer
from jevper.questions import Choice, Noul, Question


def rescaled(raw: dict[str, float]) -> dict[str, float]:
    total = sum(raw.values())
    if not total > 0 or not math.isfinite(total):
        raise MalformedAnswerError(
            f"expected some probability mass on the options, got {raw}; use method='structured'"
        )
    return {option: value / total for option, value in raw.items()}


def confidence(distribution: dict[str, float]) -> float:
    """1 minus the entropy normalized by its maximum: 0 for uniform, 1 for certain."""
    if len(distribution) < 2:
        return 1.0
    entropy = -sum(p * math.log(p) for p in distribution.values() if p > 0)
    return max(0.0, min(1.0, 1.0 - entropy / math.log(len(distribution))))


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
    sure = confidence(dist)
    if isinstance(question, Choice):
        best = max(dist, key=lambda option: dist[option])
        return ChoiceAnswer(best, shown, sure, method, surface, reasoning)
    if isinstance(question, Noul):
        return NoulAnswer(dist["yes"], shown, sure, method, surface, reasoning)
    by_level = {int(option): value for option, value in shown.items()}
    score = sum(int(option) * p for option, p in dist.items())
    return ScoreAnswer(score, by_level, sure, method, surface, reasoning)
