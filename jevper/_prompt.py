"""Prompt layout: system, examples, question, then the state last, so calls share a cached prefix.

Only the state varies between the calls of one rubric; everything before it is identical and is what
the derived prompt_cache_key covers.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jevper import _json
from jevper._errors import InvalidQuestionError
from jevper._wire import Turn
from jevper.models import State

MAX_CACHE_KEY = 256
_FOLDED_ROLES = ("system", "developer")


@dataclass(frozen=True)
class StateTurns:
    """A state split into the turns it contributes and the instructions folded into the system prompt."""

    folded: tuple[str, ...]
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Prompt:
    system: str
    turns: tuple[Turn, ...]


def state_turns(state: State, where: str = "state") -> StateTurns:
    """A text state is one user turn; a chat list keeps its user/assistant turns in order; any other JSON
    value is one user turn holding its JSON text."""
    if isinstance(state, str):
        if not state.strip():
            raise InvalidQuestionError(
                f"{where}: expected non-empty text, a chat list or a JSON value, got an empty string"
            )
        return StateTurns((), (Turn("user", f"State:\n{_json.text(where, state)}"),))
    if not is_chat(state):
        if state is None or (isinstance(state, Sequence | Mapping) and not state):
            raise InvalidQuestionError(
                f"{where}: expected text, a non-empty list of {{'role', 'content'}} turns or a JSON value, "
                f"got {state!r:.80}"
            )
        return StateTurns((), (Turn("user", f"State:\n{_json.dumps(_json.checked(where, state))}"),))
    assert isinstance(state, Sequence)
    folded: list[str] = []
    turns: list[Turn] = []
    for i, turn in enumerate(state):
        if not isinstance(turn, Mapping):
            raise InvalidQuestionError(
                f"{where}[{i}]: expected a {{'role', 'content'}} mapping, got {turn!r:.80}"
            )
        role, content = turn.get("role"), _content(f"{where}[{i}]", turn.get("content"))
        # System turns after a user turn are refused by vLLM and SGLang, so they lead instead.
        if role in _FOLDED_ROLES:
            folded.append(content)
        elif role == "user" or role == "assistant":
            turns.append(Turn(role, content))
        else:
            raise InvalidQuestionError(
                f"{where}[{i}]: expected role system, developer, user or assistant, got {role!r}"
            )
    if not turns:
        raise InvalidQuestionError(
            f"{where}: expected at least one user or assistant turn, got only system turns"
        )
    return StateTurns(tuple(folded), tuple(turns))


def is_chat(state: object) -> bool:
    """A chat list: a list in which some item is a mapping with a ``role`` (the rest must be turns too)."""
    return (
        isinstance(state, Sequence)
        and not isinstance(state, str | bytes | bytearray)
        and any(isinstance(turn, Mapping) and "role" in turn for turn in state)
    )


def _content(where: str, content: Any) -> str:
    if isinstance(content, str):
        return _json.text(f"{where}.content", content)
    if isinstance(content, Sequence) and all(
        isinstance(p, Mapping) and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(_json.text(f"{where}.content[{j}].text", p["text"]) for j, p in enumerate(content))
    raise InvalidQuestionError(f"{where}.content: expected text or a list of text parts, got {content!r:.80}")


def layout(system: str, examples: str | None, question: str, state: StateTurns) -> Prompt:
    """System (with the state's own instructions folded in), examples, question, state."""
    full_system = "\n\n".join((system, *state.folded))
    turns = [Turn("user", examples)] if examples else []
    turns.append(Turn("user", question))
    return Prompt(full_system, (*turns, *state.turns))


@functools.lru_cache(maxsize=256)
def derived_cache_key(*parts: str) -> str:
    """A stable key over everything that precedes the state."""
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()
    return f"jevper-{digest[:32]}"


def checked_cache_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_CACHE_KEY:
        shown = f"{len(key)} characters" if isinstance(key, str) else repr(key)
        raise InvalidQuestionError(
            f"prompt_cache_key: expected 1 to {MAX_CACHE_KEY} characters, got {shown}; shorten it, "
            "or leave it unset for the derived one"
        )
    return _json.text("prompt_cache_key", key)
