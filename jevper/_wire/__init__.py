"""The wire-format core: one module per surface, each building a request and reading a response.

The prompt surfaces (Chat Completions, Responses, Messages) share ``build`` and ``read`` below; System
One carries every question of a call at once and has its own (``jevper._wire.systemone``).

Everything above this package is surface-blind; the probe harness reads recorded bodies through it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from jevper._wire import chat, messages, responses
from jevper._wire.errors import (
    ERROR_KINDS,
    WORDINGS,
    Wording,
    classify,
    embedded_error,
    provider_error,
    read_error,
)
from jevper._wire.request import SchemaFormat, Turn, WireRequest
from jevper._wire.result import (
    PROMPT_SURFACES,
    SURFACES,
    ErrorBody,
    PromptSurface,
    Surface,
    TokenLogprob,
    WireResult,
    WireUsage,
)

__all__ = [
    "ERROR_KINDS",
    "PROMPT_SURFACES",
    "SURFACES",
    "WORDINGS",
    "ErrorBody",
    "PromptSurface",
    "SchemaFormat",
    "Surface",
    "TokenLogprob",
    "Turn",
    "WireRequest",
    "WireResult",
    "WireUsage",
    "Wording",
    "build",
    "classify",
    "embedded_error",
    "provider_error",
    "read",
    "read_error",
]

_READERS: dict[str, Callable[..., WireResult]] = {
    "chat_completions": chat.read,
    "responses": responses.read,
    "messages": messages.read,
}
_BUILDERS: dict[str, Callable[[WireRequest], dict[str, Any]]] = {
    "chat_completions": chat.build,
    "responses": responses.build,
    "messages": messages.build,
}


def read(surface: PromptSurface, body: Mapping[str, Any], *, model: str | None = None) -> WireResult:
    """Normalize a 200 body of ``surface``.

    Raises MalformedAnswerError naming expected and arrived when the body does not fit the surface, and
    ProviderError when a 200 body carries an error.
    """
    return _READERS[surface](body, model=model)


def build(surface: PromptSurface, request: WireRequest) -> dict[str, Any]:
    """The JSON request body ``surface`` expects for ``request``."""
    return _BUILDERS[surface](request)
