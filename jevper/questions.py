"""The three question types, and the plain-mapping form of each.

A question knows its options and nothing about how it will be asked: labels, schemas and prompts are
derived from it elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from jevper._errors import InvalidQuestionError

MAX_CHOICE_OPTIONS = 255
MIN_SCORE_LEVELS, MAX_SCORE_LEVELS = 2, 10


def _text(kind: str, name: str, value: object, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidQuestionError(
            f"{kind}: expected {name} to be a non-empty string, got {value!r}; set {name} to a description"
        )
    return value


@dataclass(frozen=True)
class Choice:
    """Pick one option out of 1 to 255: ``criteria`` maps each option to what it means.

    The answer is a probability per option (``ChoiceAnswer``).
    """

    criteria: Mapping[str, str]
    instructions: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.criteria, Mapping):
            raise InvalidQuestionError(
                f"Choice: expected criteria to be a mapping of option to description, got "
                f"{type(self.criteria).__name__}; pass criteria={{'option': 'what it means', ...}}"
            )
        count = len(self.criteria)
        if not 1 <= count <= MAX_CHOICE_OPTIONS:
            raise InvalidQuestionError(
                f"Choice: expected 1 to {MAX_CHOICE_OPTIONS} options, got {count}; split the question"
            )
        for option, description in self.criteria.items():
            _text("Choice", "each option name", option)
            _text("Choice", f"the description of {option!r}", description)
        _text("Choice", "instructions", self.instructions, optional=True)
        # Frozen, and detached from the caller's dict so later edits there change nothing here.
        object.__setattr__(self, "criteria", dict(self.criteria))

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(self.criteria)


@dataclass(frozen=True)
class Noul:
    """A yes/no question; the answer is the probability of yes (``NoulAnswer.noul``, in [0, 1])."""

    instructions: str
    criteria: str | None = None

    def __post_init__(self) -> None:
        _text("Noul", "instructions", self.instructions)
        _text("Noul", "criteria", self.criteria, optional=True)

    @property
    def options(self) -> tuple[str, ...]:
        return ("yes", "no")


@dataclass(frozen=True)
class Score:
    """Place the state on 2 to 10 ordered levels, lowest first; the answer's ``score`` is the expected
    level index under the distribution."""

    criteria: Sequence[str]
    instructions: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.criteria, str | bytes) or not isinstance(self.criteria, Sequence):
            raise InvalidQuestionError(
                f"Score: expected criteria to be a list of level descriptions, got "
                f"{type(self.criteria).__name__}; pass criteria=['lowest', ..., 'highest']"
            )
        count = len(self.criteria)
        if not MIN_SCORE_LEVELS <= count <= MAX_SCORE_LEVELS:
            raise InvalidQuestionError(
                f"Score: expected {MIN_SCORE_LEVELS} to {MAX_SCORE_LEVELS} levels, got {count}; "
                "merge or split levels"
            )
        for i, level in enumerate(self.criteria):
            _text("Score", f"level {i}", level)
        _text("Score", "instructions", self.instructions, optional=True)
        object.__setattr__(self, "criteria", tuple(self.criteria))

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(str(i) for i in range(len(self.criteria)))


Question: TypeAlias = Choice | Noul | Score
_TYPES: dict[str, type[Choice] | type[Noul] | type[Score]] = {"choice": Choice, "noul": Noul, "score": Score}


def as_question(qid: str, value: object) -> Question:
    """A question object, or a plain mapping ``{"type": "choice" | "noul" | "score", ...fields}``."""
    if isinstance(value, Choice | Noul | Score):
        return value
    if not isinstance(value, Mapping):
        raise InvalidQuestionError(
            f"question {qid!r}: expected Choice, Noul, Score or a mapping with a 'type', "
            f"got {type(value).__name__}"
        )
    fields: dict[str, Any] = dict(value)
    kind = fields.pop("type", None)
    if kind not in _TYPES:
        raise InvalidQuestionError(
            f"question {qid!r}: expected 'type' to be one of {sorted(_TYPES)}, got {kind!r}"
        )
    cls = _TYPES[str(kind)]
    try:
        return cls(**fields)
    except TypeError as exc:
        raise InvalidQuestionError(f"question {qid!r}: {cls.__name__} fields do not fit: {exc}") from None
