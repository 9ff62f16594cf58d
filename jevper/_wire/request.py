"""The surface-blind request: what to ask, before any surface decides how to spell it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class Turn:
    role: Role
    content: str


@dataclass(frozen=True)
class SchemaFormat:
    """A strict JSON schema the answer must follow."""

    name: str
    schema: Mapping[str, Any]


@dataclass(frozen=True)
class WireRequest:
    """One request, independent of the surface that will carry it."""

    model: str
    system: str
    turns: tuple[Turn, ...]
    logprobs: bool = False
    top_logprobs: int = 20
    grammar: str | None = None  # GBNF, llama.cpp's convention; others ignore the field
    schema: SchemaFormat | None = None
    prompt_cache_key: str | None = None
    reasoning_effort: str | None = None
    reasoning_summary: str | None = None  # Responses only: the summary of its reasoning it may return
    thinking_budget: int | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # the caller's own fields, merged last
    omit: frozenset[str] = frozenset()  # fields this server has refused before (server_limits)
    prefill: str | None = None  # Messages only: the opening of the answer, sent as a last assistant turn
    stop: tuple[str, ...] = ()  # Messages only: where the answer ends (the server leaves it out)
    # The output budget, when the answer's size is known: Messages (its field is required), and Chat
    # Completions for a label under a grammar the server holds to. Responses sends none.
    max_tokens: int | None = None
