"""What a surface is, as one record: each ``_wire/<surface>.py`` declares its ``RECORD``, and
``jevper._wire.RECORDS`` holds them all. Code above the wire asks a record about a trait (does it carry
logprobs, does it take a prefill) instead of comparing surface names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from jevper._wire.request import WireRequest
from jevper._wire.result import PromptSurface, Surface, WireResult

#: The SDK whose client object carries a surface's create(): the gateway picks its upstream client by it.
Sdk = Literal["openai", "anthropic"]


class Reader(Protocol):
    def __call__(self, body: Mapping[str, Any], *, model: str | None = None) -> WireResult: ...


class Conversation(Protocol):
    """The body fields carrying a conversation of ``(role, text)`` turns, roles as given ("system" too).

    ``system_as_turn`` keeps a leading system turn among the turns where the surface lifts it into a
    field of its own; ``text_parts`` writes each turn's text as a list of typed parts where the surface
    has them. A surface without the distinction ignores the flag.
    """

    def __call__(
        self, turns: Sequence[tuple[str, str]], *, system_as_turn: bool = False, text_parts: bool = False
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class PromptSurfaceRecord:
    """A surface that carries a prompt, one question a request."""

    name: PromptSurface
    title: str  # as the docs and the capability page name it
    route: str  # POST /v1/<route>
    sdk: Sdk
    sdk_resource: tuple[str, ...]  # the SDK client's attributes down to the resource whose create() is asked
    #: Fields every supported SDK version takes as keywords; the rest travels in extra_body, so an
    #: older SDK without, say, ``top_logprobs`` on ``responses.create`` still sends it.
    keywords: frozenset[str]
    build: Callable[[WireRequest], dict[str, Any]]
    read: Reader
    conversation: Conversation
    answer_list: str  # the body's list holding the answer: empty there means no answer at all
    logprobs: bool  # can the answer carry a token distribution?
    prefill: bool  # does it take the opening of the answer as a last assistant turn?
    #: Fields of jevper's own the server may refuse with a 400, dropped once and remembered.
    droppable: frozenset[str] = frozenset()
    #: Does the reported prompt-token count leave out the tokens read from the cache?
    prompt_tokens_exclude_cached: bool = False
    native: Literal[False] = False


@dataclass(frozen=True)
class NativeSurfaceRecord:
    """A surface that answers every question of a call in one request, natively (System One)."""

    name: Surface
    title: str
    route: str
    native: Literal[True] = True


SurfaceRecord = PromptSurfaceRecord | NativeSurfaceRecord
