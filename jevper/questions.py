"""The three question types, their rules, and the plain-mapping form of each: the one place that says
what a question may be.

A question knows its options and nothing about how it will be asked: labels, schemas and prompts are
derived from it elsewhere. Every field takes what the System One API takes: instructions, descriptions
and levels may be text or a JSON object or array (a model that reads prompts reads those as JSON text);
a choice has 2 to 255 options, whose descriptions may be ``None``; a score has 2 to 26 levels (the
widest any route reads; TypeSafe's System One route takes 10, ``SYSTEM_ONE_MAX_LEVELS``); a noul's
instructions are optional and its criteria absent, ``None``, ``{"true": ..., "false": ...}`` or one side
of it alone. The constructors refuse anything else with an ``InvalidQuestionError`` whose ``loc`` says
where the problem sits (``("questions", "route", "criteria")``), which the gateway reports as its 422.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias, TypeVar

from jevper import _json
from jevper._errors import InvalidQuestionError, Loc

if TYPE_CHECKING:
    from jevper.models import Example

#: A question's type, as the System One API names it.
QuestionType = Literal["choice", "noul", "score"]
T = TypeVar("T")
#: Instructions, a description or a level: text, or a JSON object or array.
Text: TypeAlias = str | Mapping[str, Any] | Sequence[Any]


@dataclass(frozen=True)
class _Owner:
    """Whose fields an error names: spelled (``Choice``, or ``questions['q']`` for a question given as a
    mapping) and as a location (``()``, or ``("questions", "q")``)."""

    name: str
    loc: Loc


#: Set while a question given as a mapping is built, so its errors name it by its id.
_OWNER: contextvars.ContextVar[_Owner | None] = contextvars.ContextVar("jevper_question_owner", default=None)


def _owner(question: object) -> _Owner:
    return _OWNER.get() or _Owner(type(question).__name__, ())


def _refused(owner: _Owner, at: Loc, problem: str) -> InvalidQuestionError:
    return InvalidQuestionError(f"{owner.name}: {problem}", loc=(*owner.loc, *at), problem=problem)


def _checked(owner: _Owner, at: Loc, spelled: str, check: Any, value: Any) -> Any:
    """``check(f"{owner}.{spelled}", value)`` from jevper._json, its refusal located at ``at``."""
    try:
        return check(f"{owner.name}.{spelled}", value)
    except InvalidQuestionError as error:
        raise InvalidQuestionError(
            str(error), loc=(*owner.loc, *at), problem=str(error).removeprefix(f"{owner.name}.")
        ) from None


def _text(
    owner: _Owner,
    at: Loc,
    value: object,
    *,
    spelled: str,
    named: str = "",
    optional: bool = False,
    nullable: bool = False,
) -> Any:
    """Text or a non-empty JSON object or array, checked; ``optional`` lets None mean "not given",
    ``nullable`` lets None stand as a value (a choice description). ``named``: the field in words."""
    name = named or spelled
    if value is None and (optional or nullable):
        return None
    if isinstance(value, str):
        if not value.strip():
            raise _refused(
                owner,
                at,
                f"expected {name} to be a non-empty string, got {value!r}; set {name} to a description",
            )
        return _checked(owner, at, spelled, _json.text, value)
    if isinstance(value, Mapping | Sequence) and not isinstance(value, bytes | bytearray) and len(value):
        return _checked(owner, at, spelled, _json.checked, value)
    what = (
        "text, None, or a JSON object or array" if nullable or optional else "text or a JSON object or array"
    )
    raise _refused(owner, at, f"expected {name} to be {what}, got {value!r:.80}")


def described(value: Any) -> str | None:
    """What a model that reads prompts is shown: text as it is, JSON as JSON text, nothing for None."""
    if value is None or isinstance(value, str):
        return value
    return _json.dumps(value)


def _own_fields(question: Choice | Noul | Score) -> None:
    """The fields every question shares, keyword-only as the documented API spells them: ``type`` (the
    class's own, accepted for code that names it) and ``examples`` (worked examples of this question
    alone, which win over the call's and the client's for it; each checked when the call is planned,
    where the question's id is known)."""
    owner = _owner(question)
    kind = type(question).__dataclass_fields__["type"].default
    if question.type != kind:
        raise _refused(
            owner,
            ("type",),
            f"expected type={kind!r} for a {type(question).__name__}, got {question.type!r}; drop type= "
            "or make the question of that type",
        )
    examples = question.examples
    if examples is None:
        examples = ()
    if isinstance(examples, str | bytes | Mapping) or not isinstance(examples, Sequence):
        raise _refused(
            owner,
            ("examples",),
            f"expected examples to be a list of Example, got {type(examples).__name__}; pass "
            "examples=[Example(state=..., answer=...)]",
        )
    object.__setattr__(question, "examples", tuple(examples))


@dataclass(frozen=True)
class Choice:
    """Pick one option out of 2 to 255: ``criteria`` maps each option to what it means (or to ``None``).

    The answer is a probability per option (``ChoiceAnswer``).
    """

    criteria: Mapping[str, Text | None]
    instructions: Text | None = None
    examples: Sequence[Example] = field(default=(), kw_only=True)
    type: QuestionType = field(default="choice", kw_only=True, repr=False)

    MIN_OPTIONS: ClassVar[int] = 2
    MAX_OPTIONS: ClassVar[int] = 255
    #: What a choice without instructions is asked with (System One asks it the same way).
    DEFAULT_INSTRUCTIONS: ClassVar[str] = "Which option fits the state best?"

    def __post_init__(self) -> None:
        _own_fields(self)
        owner = _owner(self)
        if not isinstance(self.criteria, Mapping):
            raise _refused(
                owner,
                ("criteria",),
                f"expected criteria to be a mapping of option to description, got "
                f"{type(self.criteria).__name__}; pass criteria={{'option': 'what it means', ...}}",
            )
        count = len(self.criteria)
        if not self.MIN_OPTIONS <= count <= self.MAX_OPTIONS:
            raise _refused(
                owner,
                ("criteria",),
                f"expected {self.MIN_OPTIONS} to {self.MAX_OPTIONS} options, got {count}; "
                + (
                    "split the question"
                    if count > self.MAX_OPTIONS
                    else "name every option the answer may be"
                ),
            )
        criteria: dict[str, Any] = {}
        for option, description in self.criteria.items():
            if not isinstance(option, str) or not option.strip():
                raise _refused(
                    owner,
                    ("criteria",),
                    f"expected each option name to be a non-empty string, got {option!r}; name every option",
                )
            _checked(owner, ("criteria", option), f"criteria[{option!r}]", _json.text, option)
            criteria[option] = _text(
                owner,
                ("criteria", option),
                description,
                spelled=f"criteria[{option!r}]",
                named=f"the description of {option!r}",
                nullable=True,
            )
        # Frozen, and detached from the caller's values so later edits there change nothing here.
        object.__setattr__(self, "criteria", criteria)
        object.__setattr__(
            self,
            "instructions",
            _text(owner, ("instructions",), self.instructions, spelled="instructions", optional=True),
        )

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(self.criteria)

    def rotated(self, by: int) -> Choice:
        """This choice with its options rotated ``by`` places (the option at ``by`` first)."""
        return replace(self, criteria=rotated(self.criteria, by))


def rotated(criteria: Mapping[str, T], by: int) -> dict[str, T]:
    """A choice's criteria with its options rotated ``by`` places (the option at ``by`` first): the
    orders ``option_orders=N`` asks a choice in, and the evaluation's position bias."""
    items = list(criteria.items())
    shift = by % len(items)
    return dict(items[shift:] + items[:shift])


@dataclass(frozen=True)
class Noul:
    """A yes/no question; the answer is the probability of yes (``NoulAnswer.noul``, in [0, 1]).

    ``instructions`` may be left out. ``criteria`` says what the answers mean: ``{"true": ..., "false":
    ...}`` or one side alone, as the API takes them, or one text shown with the question.
    """

    instructions: Text | None = None
    criteria: str | Mapping[str, Text | None] | None = None
    examples: Sequence[Example] = field(default=(), kw_only=True)
    type: QuestionType = field(default="noul", kw_only=True, repr=False)

    #: The sides criteria may name, in the order they are shown.
    SIDES: ClassVar[tuple[str, str]] = ("true", "false")
    DEFAULT_INSTRUCTIONS: ClassVar[str] = "Is this true of the state?"

    def __post_init__(self) -> None:
        _own_fields(self)
        owner = _owner(self)
        object.__setattr__(
            self,
            "instructions",
            _text(owner, ("instructions",), self.instructions, spelled="instructions", optional=True),
        )
        criteria = self.criteria
        if isinstance(criteria, Mapping):
            keys = list(criteria)
            if not keys or any(key not in self.SIDES for key in keys):
                raise _refused(
                    owner,
                    ("criteria",),
                    f"expected criteria keys to be 'true', 'false' or both, got {keys!r:.80}; pass "
                    "criteria={'true': 'what yes means', 'false': 'what no means'}, or one side alone",
                )
            checked = {
                key: _text(
                    owner, ("criteria", key), criteria[key], spelled=f"criteria[{key!r}]", nullable=True
                )
                for key in self.SIDES
                if key in criteria
            }
            object.__setattr__(self, "criteria", checked)
        elif criteria is not None and not isinstance(criteria, str):
            raise _refused(
                owner,
                ("criteria",),
                f"expected criteria to be text or {{'true': ..., 'false': ...}} (or one side alone), "
                f"got {criteria!r:.80}",
            )
        else:
            object.__setattr__(
                self, "criteria", _text(owner, ("criteria",), criteria, spelled="criteria", optional=True)
            )

    @property
    def options(self) -> tuple[str, ...]:
        return ("yes", "no")


@dataclass(frozen=True)
class Score:
    """Place the state on 2 to 26 ordered levels, lowest first; the answer's ``score`` is the expected
    level index under the distribution. The prompt surfaces, OpenAI's Decisions shape and Ollama's
    System One read 26 levels; TypeSafe's System One route reads 10 (``SYSTEM_ONE_MAX_LEVELS``)."""

    criteria: Sequence[Text]
    instructions: Text | None = None
    examples: Sequence[Example] = field(default=(), kw_only=True)
    type: QuestionType = field(default="score", kw_only=True, repr=False)

    MIN_LEVELS: ClassVar[int] = 2
    MAX_LEVELS: ClassVar[int] = 26
    DEFAULT_INSTRUCTIONS: ClassVar[str] = "Which level fits the state best?"

    def __post_init__(self) -> None:
        _own_fields(self)
        owner = _owner(self)
        if isinstance(self.criteria, str | bytes) or not isinstance(self.criteria, Sequence):
            raise _refused(
                owner,
                ("criteria",),
                f"expected criteria to be a list of level descriptions, got {type(self.criteria).__name__}; "
                "pass criteria=['lowest', ..., 'highest']",
            )
        count = len(self.criteria)
        if not self.MIN_LEVELS <= count <= self.MAX_LEVELS:
            raise _refused(
                owner,
                ("criteria",),
                f"expected {self.MIN_LEVELS} to {self.MAX_LEVELS} levels, got {count}; merge or split levels",
            )
        levels = tuple(
            _text(owner, ("criteria", i), level, spelled=f"criteria[{i}]", named=f"level {i}")
            for i, level in enumerate(self.criteria)
        )
        object.__setattr__(self, "criteria", levels)
        object.__setattr__(
            self,
            "instructions",
            _text(owner, ("instructions",), self.instructions, spelled="instructions", optional=True),
        )

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(str(i) for i in range(len(self.criteria)))


Question: TypeAlias = Choice | Noul | Score
#: The levels TypeSafe's System One route takes (../shared/systemone.md); Ollama's dialect takes 26.
SYSTEM_ONE_MAX_LEVELS = 10
#: Each type by the name the API gives it.
TYPES: dict[str, type[Choice] | type[Noul] | type[Score]] = {cls.type: cls for cls in (Choice, Noul, Score)}


def as_question(qid: str, value: object, *, api_only: bool = False) -> Question:
    """A question object, or a plain mapping ``{"type": "choice" | "noul" | "score", ...fields}``.

    ``api_only``: take only the API's own shapes, as the gateway does (a noul's criteria as one text is
    this client's addition, for questions asked through it)."""
    if isinstance(value, Choice | Noul | Score):
        return value
    where = _Owner(f"questions[{qid!r}]", ("questions", qid))
    if not isinstance(value, Mapping):
        raise _refused(
            where,
            (),
            f"expected Choice, Noul, Score or a mapping with a 'type', got {type(value).__name__}",
        )
    fields: dict[str, Any] = dict(value)
    kind = fields.pop("type", None)
    if kind not in TYPES:
        raise _refused(where, ("type",), f"expected 'type' to be one of {sorted(TYPES)}, got {kind!r}")
    cls = TYPES[str(kind)]
    unknown = sorted(set(fields) - {"criteria", "instructions"}, key=str)
    if unknown:
        raise _refused(
            where,
            (str(unknown[0]),),
            f"expected only 'instructions' and 'criteria' besides 'type', got {unknown!r:.80}",
        )
    if cls is not Noul and fields.get("criteria") is None:
        raise _refused(where, ("criteria",), f"field required: a {kind} question's criteria, got none")
    if api_only and cls is Noul and isinstance(fields.get("criteria"), str):
        raise _refused(
            where,
            ("criteria",),
            "expected criteria to be {'true': ..., 'false': ...}, one side alone, or null, got text",
        )
    levels = fields.get("criteria")
    if api_only and cls is Score and isinstance(levels, Sequence) and not isinstance(levels, str | bytes):
        _system_one_levels(qid, len(levels))
    named = _OWNER.set(where)
    try:
        return cls(**fields)
    finally:
        _OWNER.reset(named)


def system_one_limits(qid: str, question: Question) -> None:
    """Refuse what TypeSafe's System One route cannot take that a question may otherwise be: a score of
    more than ``SYSTEM_ONE_MAX_LEVELS`` levels."""
    if isinstance(question, Score):
        _system_one_levels(qid, len(question.criteria))


def _system_one_levels(qid: str, count: int) -> None:
    if not Score.MIN_LEVELS <= count <= SYSTEM_ONE_MAX_LEVELS:
        raise _refused(
            _Owner(f"questions[{qid!r}]", ("questions", qid)),
            ("criteria",),
            f"expected {Score.MIN_LEVELS} to {SYSTEM_ONE_MAX_LEVELS} levels, got {count}; merge or split "
            "levels (TypeSafe's System One takes 10; Ollama's dialect and the prompt surfaces take 26)",
        )
