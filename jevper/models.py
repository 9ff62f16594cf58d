"""The public values: what goes in besides questions (examples, reasoning) and what comes back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from jevper._errors import InvalidQuestionError

Method = Literal["auto", "logprobs", "grammar", "structured", "discrete"]
Api = Literal["auto", "chat_completions", "responses", "messages"]
METHODS: tuple[Method, ...] = ("auto", "logprobs", "grammar", "structured", "discrete")
APIS: tuple[Api, ...] = ("auto", "chat_completions", "responses", "messages")

#: A state is text, or a chat list of {"role": ..., "content": ...} turns.
State: TypeAlias = str | Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class ReasoningConfig:
    """How much the model may think before answering.

    ``effort`` is sent as ``reasoning_effort`` (Chat Completions) or ``reasoning.effort`` (Responses);
    ``budget_tokens`` enables thinking on the Messages surface, on top of the 1024-token answer budget.
    """

    effort: str | None = None
    budget_tokens: int | None = None

    def __post_init__(self) -> None:
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
    index for a ``Score``.
    """

    state: State
    answers: Mapping[str, str | bool | int]


@dataclass(frozen=True)
class Usage:
    """Token counts summed over every request of one call.

    ``cached_tokens`` is ``None`` when no response said anything about the cache; a reported 0 stays 0.
    """

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    requests: int = 0


@dataclass(frozen=True)
class ChoiceAnswer:
    """The answer to a ``Choice``.

    ``probabilities`` covers exactly the question's options; ``choice`` is the most probable option and
    ``confidence`` is 1 minus the normalized entropy (0 for a uniform answer, 1 for a certain one).
    """

    choice: str
    probabilities: dict[str, float]
    confidence: float
    method: str
    surface: str
    reasoning: str | None = None


@dataclass(frozen=True)
class NoulAnswer:
    """The answer to a ``Noul``: ``noul`` is the probability of yes, in [0, 1]."""

    noul: float
    probabilities: dict[str, float]
    confidence: float
    method: str
    surface: str
    reasoning: str | None = None


@dataclass(frozen=True)
class ScoreAnswer:
    """The answer to a ``Score``: ``probabilities`` per level index, ``score`` their expectation."""

    score: float
    probabilities: dict[int, float]
    confidence: float
    method: str
    surface: str
    reasoning: str | None = None


Answer: TypeAlias = ChoiceAnswer | NoulAnswer | ScoreAnswer


@dataclass(frozen=True)
class SystemOneResponse:
    """The answers of one ``system_one`` call, keyed by question id in the order the questions came."""

    answers: dict[str, Answer]
    usage: Usage
    #: question id -> the trace the server returned with that answer, for answers that had one
    reasoning: dict[str, str] = field(default_factory=dict)
    #: per question: method, surface, requests and why; "server_limits": fields this server refused
    debug: dict[str, Any] = field(default_factory=dict)
