"""The wire-format core: one module per surface, each building a request and reading a response.

Each surface module declares what its surface is in one ``RECORD``; ``RECORDS`` below is the one
registry of them, and everything else about surfaces (the names, the command lines' choices) is read
from it. The prompt surfaces (Chat Completions, Responses, Messages) share ``build`` and ``read`` below;
System One carries every question of a call at once and has its own (``jevper._wire.systemone``).

Everything above this package is surface-blind; the probe harness reads recorded bodies through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jevper._wire import chat, messages, responses, systemone
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
    ErrorBody,
    PromptSurface,
    Surface,
    TokenLogprob,
    WireResult,
    WireUsage,
)
from jevper._wire.surface import NativeSurfaceRecord, PromptSurfaceRecord, SurfaceRecord

__all__ = [
    "ERROR_KINDS",
    "PROMPT_RECORDS",
    "PROMPT_SURFACES",
    "RECORDS",
    "SURFACES",
    "WORDINGS",
    "ErrorBody",
    "NativeSurfaceRecord",
    "PromptSurface",
    "PromptSurfaceRecord",
    "SchemaFormat",
    "Surface",
    "SurfaceRecord",
    "TokenLogprob",
    "Turn",
    "WireRequest",
    "WireResult",
    "WireUsage",
    "Wording",
    "build",
    "classify",
    "embedded_error",
    "prompt_record",
    "provider_error",
    "read",
    "read_error",
    "record",
]

#: Every surface, in the order the docs, the catalogue and the capability page list them.
RECORDS: Mapping[Surface, SurfaceRecord] = {
    r.name: r for r in (chat.RECORD, responses.RECORD, messages.RECORD, systemone.RECORD)
}
PROMPT_RECORDS: Mapping[PromptSurface, PromptSurfaceRecord] = {
    r.name: r for r in RECORDS.values() if isinstance(r, PromptSurfaceRecord)
}
PROMPT_SURFACES: tuple[PromptSurface, ...] = tuple(PROMPT_RECORDS)
SURFACES: tuple[Surface, ...] = tuple(RECORDS)


def record(surface: str) -> SurfaceRecord:
    """The record of ``surface``; a KeyError names the surfaces there are."""
    for found in RECORDS.values():
        if found.name == surface:
            return found
    raise KeyError(f"expected a surface among {list(RECORDS)}, got {surface!r}")


def prompt_record(surface: str) -> PromptSurfaceRecord:
    """The record of the prompt surface ``surface``; a KeyError names the prompt surfaces there are."""
    for found in PROMPT_RECORDS.values():
        if found.name == surface:
            return found
    raise KeyError(f"expected a prompt surface among {list(PROMPT_RECORDS)}, got {surface!r}")


def read(surface: PromptSurface, body: Mapping[str, Any], *, model: str | None = None) -> WireResult:
    """Normalize a 200 body of ``surface``.

    Raises MalformedAnswerError naming expected and arrived when the body does not fit the surface, and
    ProviderError when a 200 body carries an error.
    """
    return PROMPT_RECORDS[surface].read(body, model=model)


def build(surface: PromptSurface, request: WireRequest) -> dict[str, Any]:
    """The JSON request body ``surface`` expects for ``request``."""
    return PROMPT_RECORDS[surface].build(request)
