"""The answers of a Decisions call, typed, and ``to_api()``: the body OpenAI's ``Decision`` schema describes.

Answers come in question order, each a predicate (the probability the statement is true), a choice (the
most probable value, a confidence and a probability per value), a score (the expected level index, a
confidence and a probability per level) or a refusal, which costs only its own question. jevper's own
answers map onto them here (``answered``), as do a native server's (``from_api``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from jevper._distribution import clamped, renormalised
from jevper.decisions.rules import DecisionQuestion
from jevper.models import Answer, ChoiceAnswer, NoulAnswer, ScoreAnswer, Usage

__all__ = [
    "ChoiceProbability",
    "DecisionAnswer",
    "DecisionChoice",
    "DecisionPredicate",
    "DecisionRefusal",
    "DecisionResponse",
    "DecisionScore",
    "DecisionUsage",
    "LevelProbability",
]


@dataclass(frozen=True)
class ChoiceProbability:
    """A choice's value (typed: ``True`` and ``"true"`` are two values) and its probability."""

    value: str | bool
    probability: float


@dataclass(frozen=True)
class LevelProbability:
    """A score's level: its index (``value``), its label, and its probability."""

    value: int
    label: str
    probability: float


@dataclass(frozen=True)
class DecisionPredicate:
    """How likely the question's statement is true of the input, in [0, 1]."""

    probability: float
    name: str | None = None
    type: Literal["predicate"] = field(default="predicate", init=False)

    def to_api(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "probability": self.probability}


@dataclass(frozen=True)
class DecisionChoice:
    """The most probable value, the probability of each value in the question's order, and the confidence:
    ``(p_max - 1/n) / (1 - 1/n)`` over the n values, as jevper's ``ChoiceAnswer`` defines it."""

    choice: str | bool
    confidence: float
    probabilities: tuple[ChoiceProbability, ...]
    name: str | None = None
    type: Literal["choice"] = field(default="choice", init=False)

    def to_api(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "name": self.name,
            "choice": self.choice,
            "confidence": self.confidence,
            "probabilities": [{"value": p.value, "probability": p.probability} for p in self.probabilities],
        }


@dataclass(frozen=True)
class DecisionScore:
    """The expected level index under the distribution, the probability of each level (lowest first), and
    the confidence as jevper's ``ScoreAnswer`` defines it."""

    score: float
    confidence: float
    probabilities: tuple[LevelProbability, ...]
    name: str | None = None
    type: Literal["score"] = field(default="score", init=False)

    def to_api(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "name": self.name,
            "score": self.score,
            "confidence": self.confidence,
            "probabilities": [
                {"value": p.value, "label": p.label, "probability": p.probability} for p in self.probabilities
            ],
        }


@dataclass(frozen=True)
class DecisionRefusal:
    """The model declined this question, or its answer could not be read; the other questions still
    answer. ``reason`` says what happened (jevper's error, or None when a server refused natively); it is
    not part of the API's body."""

    name: str | None = None
    reason: str | None = None
    type: Literal["refusal"] = field(default="refusal", init=False)

    def to_api(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name}


DecisionAnswer: TypeAlias = DecisionPredicate | DecisionChoice | DecisionScore | DecisionRefusal


@dataclass(frozen=True)
class DecisionUsage:
    """Token counts summed over every request of one call; a count no server reported is 0."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    requests: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_api(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {
                "cached_tokens": self.cached_tokens,
                "cache_write_tokens": self.cache_write_tokens,
            },
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "total_tokens": self.total_tokens,
        }

    @classmethod
    def of(cls, usage: Usage) -> DecisionUsage:
        """jevper's usage of a call, in the Decisions API's counts."""
        return cls(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cached_tokens=usage.cached_tokens or 0,
            reasoning_tokens=usage.reasoning_tokens or 0,
            requests=usage.n_calls,
        )


@dataclass(frozen=True)
class DecisionResponse:
    """The answers of one ``decisions.create`` call, in question order."""

    answers: tuple[DecisionAnswer, ...]
    model: str
    usage: DecisionUsage
    #: as ``SystemOneResponse.debug``: per question (by its path, ``questions[0]``) the method, surface,
    #: requests and why; a refused question's reason
    debug: dict[str, Any] = field(default_factory=dict)

    def to_api(self) -> dict[str, Any]:
        """The body OpenAI's ``Decision`` describes: ``answers``, ``model`` and ``usage``."""
        return {
            "answers": [answer.to_api() for answer in self.answers],
            "model": self.model,
            "usage": self.usage.to_api(),
        }


def answered(question: DecisionQuestion, answer: Answer) -> DecisionAnswer:
    """jevper's answer to ``question.question`` in the Decisions API's terms; probabilities sum to 1."""
    name = question.name
    if isinstance(answer, NoulAnswer):
        return DecisionPredicate(clamped(answer.noul), name)
    if isinstance(answer, ChoiceAnswer):
        options = question.question.options
        shares = _distribution([answer.probabilities.get(option, 0.0) for option in options])
        peak = options.index(answer.choice) if answer.choice in options else shares.index(max(shares))
        return DecisionChoice(
            question.values[peak],
            clamped(answer.confidence),
            tuple(ChoiceProbability(v, p) for v, p in zip(question.values, shares, strict=True)),
            name,
        )
    assert isinstance(answer, ScoreAnswer)
    shares = _distribution([answer.probabilities.get(i, 0.0) for i in range(len(question.labels))])
    return DecisionScore(
        sum(i * p for i, p in enumerate(shares)),
        clamped(answer.confidence),
        tuple(
            LevelProbability(i, label, p)
            for i, (label, p) in enumerate(zip(question.labels, shares, strict=True))
        ),
        name,
    )


def from_api(body: Mapping[str, Any]) -> DecisionResponse:
    """A body that follows the ``Decision`` schema (``jevper._wire.decisions.read`` checked it), typed."""
    usage = body["usage"]
    return DecisionResponse(
        tuple(_from_api(answer) for answer in body["answers"]),
        str(body["model"]),
        DecisionUsage(
            input_tokens=usage["input_tokens"],
            output_tokens=usage["output_tokens"],
            cached_tokens=usage["input_tokens_details"]["cached_tokens"],
            cache_write_tokens=usage["input_tokens_details"]["cache_write_tokens"],
            reasoning_tokens=usage["output_tokens_details"]["reasoning_tokens"],
            requests=1,
        ),
    )


def _from_api(answer: Mapping[str, Any]) -> DecisionAnswer:
    name, kind = answer.get("name"), answer["type"]
    if kind == "predicate":
        return DecisionPredicate(float(answer["probability"]), name)
    if kind == "choice":
        listed = answer["probabilities"]
        return DecisionChoice(
            answer["choice"],
            float(answer["confidence"]),
            tuple(ChoiceProbability(p["value"], float(p["probability"])) for p in listed),
            name,
        )
    if kind == "score":
        listed = answer["probabilities"]
        return DecisionScore(
            float(answer["score"]),
            float(answer["confidence"]),
            tuple(LevelProbability(p["value"], p["label"], float(p["probability"])) for p in listed),
            name,
        )
    return DecisionRefusal(name)


def _distribution(values: Sequence[float]) -> list[float]:
    """The probabilities as given when they sum to 1 (the server's own figures, kept), else renormalised
    (``normalize_probabilities=False`` keeps a model's own numbers, which may not)."""
    given = [float(value) for value in values]
    return given if abs(sum(given) - 1.0) <= 1e-9 else list(renormalised(given))
