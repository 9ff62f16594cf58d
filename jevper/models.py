"""The public values: what goes in besides questions (examples, reasoning) and what comes back."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias, TypedDict

from jevper._errors import ClientCapabilityError, InvalidQuestionError
from jevper._wire import PROMPT_RECORDS, SURFACES, Surface, prompt_record
from jevper._wire.decisions import DecisionsRoute

if TYPE_CHECKING:
    from jevper.decisions.answers import DecisionResponse

Method = Literal["auto", "logprobs", "grammar", "structured", "discrete"]
#: "auto", or a surface's name: chat_completions, responses, messages or systemone (jevper._wire.RECORDS
#: holds what each surface is)
Api = Literal["auto", Surface]
METHODS: tuple[Method, ...] = ("auto", "logprobs", "grammar", "structured", "discrete")
APIS: tuple[Api, ...] = ("auto", *SURFACES)
#: What a client's ``api`` may be: an ``Api``, or "decisions" (OpenAI's Decisions API, asked natively), which
#: decisions.create() alone takes.
ClientApi: TypeAlias = Api | DecisionsRoute


def sdk_for(api: str) -> Literal["openai", "anthropic"]:
    """The SDK whose client carries ``api``: anthropic's for Messages, openai's for every other value."""
    return prompt_record(api).sdk if api in PROMPT_RECORDS else "openai"


#: A state is text, a chat list of {"role": ..., "content": ...} turns, or any other JSON value (an
#: object, a list that is not a chat list, a number), which a model that reads prompts reads as JSON text.
State: TypeAlias = str | Sequence[Any] | Mapping[str, Any] | int | float | bool


@dataclass(frozen=True)
class ReasoningConfig:
    """How much the model may think before answering.

    ``effort`` is sent as ``reasoning_effort`` (Chat Completions) or ``reasoning.effort`` (Responses);
    ``budget_tokens`` enables thinking on the Messages surface, on top of the 1024-token answer budget.
    ``summary`` (``auto``, ``concise``, ``detailed``) is sent as ``reasoning.summary`` on Responses, the
    one surface with the field; the others return the whole trace, which ``answer.reasoning`` holds.
    ``context`` (``auto``, ``current_turn``, ``all_turns``) says whose reasoning a turn sees: every call
    here is one turn, so each value means the same. ``mode`` is ``auto`` or ``native``: the model thinks
    in the very request its answer is read from, on every surface; ``two_step`` (a separate thinking
    request, then a classifying one) is refused, since jevper does not ask twice for one answer.
    """

    effort: str | None = None
    budget_tokens: int | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: Literal["auto", "native", "two_step"] = "auto"

    SUMMARIES: ClassVar[tuple[str, ...]] = ("auto", "concise", "detailed")
    CONTEXTS: ClassVar[tuple[str, ...]] = ("auto", "current_turn", "all_turns")

    def __post_init__(self) -> None:
        for name, allowed in (("summary", self.SUMMARIES), ("context", self.CONTEXTS)):
            value = getattr(self, name)
            if value is not None and value not in allowed:
                raise InvalidQuestionError(
                    f"ReasoningConfig: expected {name} to be one of {list(allowed)} or None, got {value!r}"
                )
        if self.mode == "two_step":
            raise ClientCapabilityError(
                "ReasoningConfig: expected mode='auto' or 'native', got 'two_step'; jevper reads each "
                "answer from the request the model thinks in (native reasoning on every surface) and "
                "never asks a second time for it; drop mode="
            )
        if self.mode not in ("auto", "native"):
            raise InvalidQuestionError(
                f"ReasoningConfig: expected mode to be 'auto' or 'native', got {self.mode!r}"
            )
        if self.budget_tokens is not None and (
            isinstance(self.budget_tokens, bool)
            or not isinstance(self.budget_tokens, int)
            or self.budget_tokens < 1
        ):
            raise InvalidQuestionError(
                "ReasoningConfig: expected budget_tokens to be a positive integer, "
                f"got {self.budget_tokens!r}"
            )


@dataclass(frozen=True)
class Example:
    """A worked example: a state and the right answer to some of the questions.

    An answer is the option name for a ``Choice``, ``True``/``False`` for a ``Noul``, and the level
    index for a ``Score``. ``answers`` holds them by question id; ``answer`` is one answer (the
    documented API's spelling), for the question it is given for (``examples={"q": [Example(...)]}``) or,
    in a plain list, for every question of a call it fits. ``probabilities`` is the example's own
    distribution over the answers, kept with it (the prompt shows the answer).
    """

    state: State
    answers: Mapping[str, str | bool | int] = field(default_factory=dict)
    answer: str | bool | int | None = None
    probabilities: Mapping[Any, float] | None = None


class NoulCriteria(TypedDict, total=False):
    """What a ``Noul``'s answers mean: ``{"true": ..., "false": ...}``, each any JSON value."""

    true: Any
    false: Any


#: The examples of a client or a call: a list (each example's ``answers`` name their questions), or a
#: mapping of question id to that question's examples.
Examples: TypeAlias = Sequence[Example] | Mapping[str, Sequence[Example]]


@dataclass(frozen=True)
class ModelMetadata:
    """One model a System One deployment lists (``GET /v1/models``'s ``{"models": [...]}``)."""

    name: str
    description: str = ""
    release_date: str | None = None


@dataclass(frozen=True)
class Usage:
    """What one call cost, summed over every request of it.

    ``input_tokens``, ``output_tokens`` (the thinking included), ``reasoning_tokens`` (the thinking alone)
    and ``cached_tokens`` (the input read from the server's cache) are each ``None`` when a request of the
    call did not report that count, so a sum is never a part passed off as the whole; a reported 0 stays
    0. ``n_calls`` counts the requests answered, ``n_retries`` the requests asked again after a transient
    failure (a 429, a 503, a refused connection), and ``latency`` is the call's wall time in seconds.

    ``prompt_tokens``, ``completion_tokens`` and ``requests`` are the former names of ``input_tokens``,
    ``output_tokens`` and ``n_calls``, read with a ``DeprecationWarning`` for one release.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    n_calls: int = 0
    n_retries: int = 0
    latency: float = 0.0

    @property
    def prompt_tokens(self) -> int | None:
        """Deprecated: ``input_tokens``."""
        _renamed("prompt_tokens", "input_tokens")
        return self.input_tokens

    @property
    def completion_tokens(self) -> int | None:
        """Deprecated: ``output_tokens``."""
        _renamed("completion_tokens", "output_tokens")
        return self.output_tokens

    @property
    def requests(self) -> int:
        """Deprecated: ``n_calls``."""
        _renamed("requests", "n_calls")
        return self.n_calls


def _renamed(old: str, new: str) -> None:
    warnings.warn(
        f"Usage.{old} is deprecated and goes in the next release; read Usage.{new}, the same count",
        DeprecationWarning,
        stacklevel=3,
    )


@dataclass(frozen=True)
class ChoiceAnswer:
    """The answer to a ``Choice``.

    ``probabilities`` covers exactly the question's options; ``choice`` is the most probable option.
    ``confidence`` is the System One API's: ``(p_max - 1/n) / (1 - 1/n)`` over the n options (1 when n is
    1), so 0 when every option is equally likely and 1 when one option holds all the mass. A System One
    server's own value is kept as it sent it.
    """

    choice: str
    probabilities: dict[str, float]
    confidence: float
    method: str
    surface: str
    reasoning: str | None = None
    type: Literal["choice"] = field(default="choice", init=False)

    def to_api(self) -> dict[str, Any]:
        """This answer in the System One API's shape."""
        return {
            "type": self.type,
            "choice": self.choice,
            "probabilities": _summing_to_one(self.probabilities),
            "confidence": self.confidence,
        }


@dataclass(frozen=True)
class NoulAnswer:
    """The answer to a ``Noul``: ``noul`` is the probability of yes, in [0, 1].

    The System One API gives a noul no confidence; ``confidence`` here is the choice formula over
    (yes, no), which is ``|2 * noul - 1|``: 0 at 0.5, 1 at 0 or 1.
    """

    noul: float
    probabilities: dict[str, float]
    confidence: float
    method: str
    surface: str
    reasoning: str | None = None
    type: Literal["noul"] = field(default="noul", init=False)

    def to_api(self) -> dict[str, Any]:
        """This answer in the System One API's shape (which has no confidence for a noul)."""
        return {"type": self.type, "noul": self.noul}


@dataclass(frozen=True)
class ScoreAnswer:
    """The answer to a ``Score``: ``probabilities`` per level index, ``score`` their expectation.

    ``legend`` maps each level index to the level as the question gave it. ``confidence`` is the System
    One API's: ``max(0, 1 - D / U)``, where ``D = sum p_i * |i - k|`` is the expected distance from the
    most probable level k and ``U = sum_i |i - (n - 1) / 2| / n`` that distance for a uniform answer over
    the n levels. A System One server's own value is kept as it sent it.
    """

    score: float
    probabilities: dict[int, float]
    legend: dict[int, Any]
    confidence: float
    method: str
    surface: str
    reasoning: str | None = None
    type: Literal["score"] = field(default="score", init=False)

    def to_api(self) -> dict[str, Any]:
        """This answer in the System One API's shape: level indices as string keys."""
        probabilities = _summing_to_one(self.probabilities)
        return {
            "type": self.type,
            "score": self.score,
            "legend": {str(level): text for level, text in self.legend.items()},
            "probabilities": {str(level): p for level, p in probabilities.items()},
            "confidence": self.confidence,
        }


def _summing_to_one(probabilities: Mapping[Any, float]) -> dict[Any, float]:
    """The probabilities as given when they sum to 1 (``normalize_probabilities=False`` keeps a model's own
    numbers, which may not): the API's body always holds a distribution."""
    total = sum(probabilities.values())
    if abs(total - 1.0) <= 1e-9 or total <= 0:
        return dict(probabilities)
    return {key: p / total for key, p in probabilities.items()}


Answer: TypeAlias = ChoiceAnswer | NoulAnswer | ScoreAnswer


@dataclass(frozen=True)
class SystemOneResponse:
    """The answers of one ``system_one`` call, keyed by question id in the order the questions came."""

    answers: dict[str, Answer]
    usage: Usage
    #: question id -> the trace the server returned with that answer, for answers that had one
    reasoning: dict[str, str] = field(default_factory=dict)
    #: per question: method, surface, requests and why; "server_limits": fields this server refused;
    #: "route" (api="auto"): the surface the model is asked on and why
    debug: dict[str, Any] = field(default_factory=dict)
    #: the model that answered: as a System One server named it, else the model id asked for
    model: str = ""

    @property
    def choices(self) -> dict[str, ChoiceAnswer]:
        """The answers to the call's choices, by question id."""
        return {qid: a for qid, a in self.answers.items() if isinstance(a, ChoiceAnswer)}

    @property
    def nouls(self) -> dict[str, NoulAnswer]:
        """The answers to the call's nouls, by question id."""
        return {qid: a for qid, a in self.answers.items() if isinstance(a, NoulAnswer)}

    @property
    def scores(self) -> dict[str, ScoreAnswer]:
        """The answers to the call's scores, by question id."""
        return {qid: a for qid, a in self.answers.items() if isinstance(a, ScoreAnswer)}

    def to_decision(self) -> DecisionResponse:
        """The same answers in OpenAI's Decisions shape (``client.decisions.create``'s), each named by its
        question id: a noul as a predicate, a choice's values as its options, a score's levels labelled
        by its legend."""
        from jevper.decisions.answers import (  # the Decisions package stands on these values
            ChoiceProbability,
            DecisionChoice,
            DecisionPredicate,
            DecisionResponse,
            DecisionScore,
            DecisionUsage,
            LevelProbability,
        )

        answers: list[Any] = []
        for qid, answer in self.answers.items():
            if isinstance(answer, NoulAnswer):
                answers.append(DecisionPredicate(answer.noul, qid))
            elif isinstance(answer, ChoiceAnswer):
                shares = _summing_to_one(answer.probabilities)
                chances = tuple(ChoiceProbability(value, p) for value, p in shares.items())
                answers.append(DecisionChoice(answer.choice, answer.confidence, chances, qid))
            else:
                shares = _summing_to_one(answer.probabilities)
                levels = tuple(
                    LevelProbability(level, str(answer.legend.get(level, level)), p)
                    for level, p in sorted(shares.items())
                )
                answers.append(DecisionScore(answer.score, answer.confidence, levels, qid))
        usage = self.usage
        counts = DecisionUsage(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cached_tokens=usage.cached_tokens or 0,
            reasoning_tokens=usage.reasoning_tokens or 0,
            requests=usage.n_calls,
        )
        return DecisionResponse(tuple(answers), self.model, counts, dict(self.debug))

    def to_api(self) -> dict[str, Any]:
        """A System One API response body for these answers, however they were read: ``model``,
        ``answers`` (each with its ``type``) and ``usage`` (``input_tokens``, ``output_tokens``; null where
        the server reported none)."""
        return {
            "model": self.model,
            "answers": {qid: answer.to_api() for qid, answer in self.answers.items()},
            "usage": {
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
            },
        }
