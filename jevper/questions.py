"""The three question types, and the plain-mapping form of each.

A question knows its options and nothing about how it will be asked: labels, schemas and prompts are
derived from it elsewhere. Every field takes what the System One API takes: instructions, descriptions
and levels may be text or a JSON object or array (a model that reads prompts reads those as JSON text),
a choice description may be ``None``, and noul criteria may be ``{"true": ..., "false": ...}``.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from jevper import _json
from jevper._errors import InvalidQuestionError

MAX_CHOICE_OPTIONS = 255
MIN_SCORE_LEVELS, MAX_SCORE_LEVELS = 2, 10
NOUL_CRITERIA_KEYS = ("true", "false")

#: Instructions, a description or a level: text, or a JSON object or array.
Text: TypeAlias = str | Mapping[str, Any] | Sequence[Any]

#: Whose fields an error names: the class, or ``questions['q']`` for a question given as a mapping.
_OWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar("jevper_question_owner", default=None)


def _owner(question: object) -> str:
    return _OWNER.get() or type(question).__name__


def _text(
    owner: str, path: str, value: object, *, named: str = "", optional: bool = False, nullable: bool = False
) -> Any:
    """Text or a non-empty JSON object or array, checked; ``optional`` lets None mean "not given",
    ``nullable`` lets None stand as a value (a choice description). ``named``: the field in words."""
    name = named or path
    if value is None and (optional or nullable):
        return None
    if isinstance(value, str):
        if not value.strip():
            raise InvalidQuestionError(
                f"{owner}: expected {name} to be a non-empty string, got {value!r}; "
                f"set {name} to a description"
            )
        return _json.text(f"{owner}.{path}", value)
    if isinstance(value, Mapping | Sequence) and not isinstance(value, bytes | bytearray) and len(value):
        return _json.checked(f"{owner}.{path}", value)
    what = "text, None, or a JSON object or array" if nullable else "text or a JSON object or array"
    raise InvalidQuestionError(f"{owner}: expected {name} to be {what}, got {value!r:.80}")


def described(value: Any) -> str | None:
    """What a model that reads prompts is shown: text as it is, JSON as JSON text, nothing for None."""
    if value is None or isinstance(value, str):
        return value
    return _json.dumps(value)


@dataclass(frozen=True)
class Choice:
    """Pick one option out of 1 to 255: ``criteria`` maps each option to what it means (or to ``None``).

    The answer is a probability per option (``ChoiceAnswer``).
    """

    criteria: Mapping[str, Text | None]
    instructions: Text | None = None

    def __post_init__(self) -> None:
        owner = _owner(self)
        if not isinstance(self.criteria, Mapping):
            raise InvalidQuestionError(
                f"{owner}: expected criteria to be a mapping of option to description, got "
                f"{type(self.criteria).__name__}; pass criteria={{'option': 'what it means', ...}}"
            )
        count = len(self.criteria)
        if not 1 <= count <= MAX_CHOICE_OPTIONS:
            raise InvalidQuestionError(
                f"{owner}: expected 1 to {MAX_CHOICE_OPTIONS} options, got {count}; split the question"
            )
        criteria: dict[str, Any] = {}
        for option, description in self.criteria.items():
            if not isinstance(option, str) or not option.strip():
                raise InvalidQuestionError(
                    f"{owner}: expected each option name to be a non-empty string, got {option!r}; "
                    "name every option"
                )
            _json.text(f"{owner}.criteria[{option!r}]", option)
            criteria[option] = _text(
                owner,
                f"criteria[{option!r}]",
                description,
                named=f"the description of {option!r}",
                nullable=True,
            )
        # Frozen, and detached from the caller's values so later edits there change nothing here.
        object.__setattr__(self, "criteria", criteria)
        object.__setattr__(
            self, "instructions", _text(owner, "instructions", self.instructions, optional=True)
        )

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(self.criteria)


@dataclass(frozen=True)
class Noul:
    """A yes/no question; the answer is the probability of yes (``NoulAnswer.noul``, in [0, 1]).

    ``criteria`` says what each answer means: ``{"true": ..., "false": ...}`` as the API takes it, or one
    text shown with the question.
    """

    instructions: Text
    criteria: str | Mapping[str, Text | None] | None = None

    def __post_init__(self) -> None:
        owner = _owner(self)
        object.__setattr__(self, "instructions", _text(owner, "instructions", self.instructions))
        criteria = self.criteria
        if isinstance(criteria, Mapping):
            if sorted(criteria, key=repr) != sorted(NOUL_CRITERIA_KEYS, key=repr):
                raise InvalidQuestionError(
                    f"{owner}: expected criteria keys to be exactly 'true' and 'false', got "
                    f"{list(criteria)!r:.80}; pass criteria={{'true': 'what yes means', "
                    "'false': 'what no means'}"
                )
            checked = {
                key: _text(owner, f"criteria[{key!r}]", criteria[key], nullable=True)
                for key in NOUL_CRITERIA_KEYS
            }
            object.__setattr__(self, "criteria", checked)
        elif criteria is not None and not isinstance(criteria, str):
            raise InvalidQuestionError(
                f"{owner}: expected criteria to be text or {{'true': ..., 'false': ...}}, "
                f"got {criteria!r:.80}"
            )
        else:
            object.__setattr__(self, "criteria", _text(owner, "criteria", criteria, optional=True))

    @property
    def options(self) -> tuple[str, ...]:
        return ("yes", "no")


@dataclass(frozen=True)
class Score:
    """Place the state on 2 to 10 ordered levels, lowest first; the answer's ``score`` is the expected
    level index under the distribution."""

    criteria: Sequence[Text]
    instructions: Text | None = None

    def __post_init__(self) -> None:
        owner = _owner(self)
        if isinstance(self.criteria, str | bytes) or not isinstance(self.criteria, Sequence):
            raise InvalidQuestionError(
                f"{owner}: expected criteria to be a list of level descriptions, got "
                f"{type(self.criteria).__name__}; pass criteria=['lowest', ..., 'highest']"
            )
        count = len(self.criteria)
        if not MIN_SCORE_LEVELS <= count <= MAX_SCORE_LEVELS:
            raise InvalidQuestionError(
                f"{owner}: expected {MIN_SCORE_LEVELS} to {MAX_SCORE_LEVELS} levels, got {count}; "
                "merge or split levels"
            )
        levels = tuple(
            _text(owner, f"criteria[{i}]", level, named=f"level {i}") for i, level in enumerate(self.criteria)
        )
        object.__setattr__(self, "criteria", levels)
        object.__setattr__(
            self, "instructions", _text(owner, "instructions", self.instructions, optional=True)
        )

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
    named = _OWNER.set(f"questions[{qid!r}]")
    try:
        return cls(**fields)
    except TypeError as exc:
        raise InvalidQuestionError(f"question {qid!r}: {cls.__name__} fields do not fit: {exc}") from None
    finally:
        _OWNER.reset(named)
