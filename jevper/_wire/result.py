"""The normalized values every surface reader produces: one shape, whatever the wire said."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: The routes that carry a prompt, one question a request: each builds a WireRequest, reads a WireResult.
#: The names as types (a type cannot be read from a value); each surface's RECORD in its own module says
#: the rest, and a test holds these to the registry (jevper._wire.RECORDS).
PromptSurface = Literal["chat_completions", "responses", "messages"]
#: Every route an answer can come from: the prompt surfaces, and System One, which answers every
#: question of a call in one request, natively (jevper/_wire/systemone.py).
Surface = Literal[PromptSurface, "systemone"]

ErrorShape = Literal["object", "detail", "string", "text", "empty"]


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token, its logprob, and the alternatives the server listed for that position."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...]  # alternatives, in the server's order


@dataclass(frozen=True)
class WireUsage:
    """Token counts as the server reported them; ``None`` wherever the server said nothing."""

    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None  # None when the server says nothing; 0 kept as 0
    cached_tokens_path: str | None  # where the cached count was read, e.g. "usage.cache_read_input_tokens"
    reasoning_tokens: int | None = None  # the output tokens spent thinking, where the server says


@dataclass(frozen=True)
class WireResult:
    """One response body of any surface, normalized."""

    surface: PromptSurface
    text: str | None  # the answer text (first choice / output_text / text blocks)
    reasoning: str | None  # any trace, wherever it was
    reasoning_field: str | None  # "reasoning", "reasoning_content", "thinking", "reasoning_text",
    # "summary_text" or "inline" (a <think> block inside the answer text)
    logprobs: tuple[TokenLogprob, ...] | None  # None = no logprob field at all; () = an empty list
    finish: str | None  # finish_reason / status / stop_reason as the server said it
    truncated_by: str | None  # the budget field to raise when the server says the answer was cut
    choices: int  # how many choices / message outputs came back
    content_types: tuple[str, ...]  # block / part types seen
    usage: WireUsage
    raw: Mapping[str, Any]  # the parsed body, for evidence
    stop_sequence: str | None = None  # the stop sequence that ended the answer, where the server says
    #: The model declined to answer: its own words (a ``refusal``), else the finish or stop reason that says
    #: so ("content_filter", "refusal"); None for an answer.
    refusal: str | None = None


@dataclass(frozen=True)
class ErrorBody:
    """A refusal as the server worded it, classified once by the wording table in ``errors``."""

    status: int | None
    message: str  # the server's own words
    shape: ErrorShape
    names_model: bool  # does the message quote the requested model id?
    kind: str = "other"  # see errors.ERROR_KINDS
    field: str | None = None  # the request field the server named, when the table knows it
    server: str | None = None  # whose wording matched, when one did
    param: str | None = None  # the param of OpenAI's error envelope, as sent ("questions[3].levels")
