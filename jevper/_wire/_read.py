"""Typed accessors for parsed JSON bodies: every mismatch is a MalformedAnswerError naming the path."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from jevper._errors import MalformedAnswerError

# A logprob a hair above zero is float noise from the server's own softmax, not a claim of p > 1.
LOGPROB_TOLERANCE = 1e-6
#: The most violations a native surface's MalformedAnswerError quotes.
SHOWN = 5


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:60]!r}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def malformed(surface: str, path: str, expected: str, value: object) -> MalformedAnswerError:
    return MalformedAnswerError(
        f"{surface} response: expected {path} to be {expected}, got {_kind(value)}; "
        "the server's body does not fit this surface — check the base_url and the api= setting"
    )


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    # A parsed body's objects are dicts: checked before the slower abstract-class test.
    return type(value) is dict or isinstance(value, Mapping)


def brief(value: object) -> str:
    """What arrived, as a native surface's violation names it: a scalar by its repr, a container by kind."""
    if value is None:
        return "null"
    if isinstance(value, bool | int | float | str):
        return repr(value)[:80]
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def violated(surface: str, expected: str, found: Sequence[str], chat_apis: str) -> MalformedAnswerError:
    """A native surface's refusal of a body that breaks its schema: the first few violations, then a count."""
    shown = "; ".join(found[:SHOWN]) + (f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else "")
    return MalformedAnswerError(
        f"{surface} response: expected {expected}, got {len(found)} violation(s): {shown}; the server does "
        f"not answer as the API says — report it, or ask through a chat surface ({chat_apis})"
    )


def mapping(surface: str, path: str, value: object) -> Mapping[str, Any]:
    if type(value) is dict:  # what json.loads gives, told apart without the ABC's slower check
        return value
    if not isinstance(value, Mapping):
        raise malformed(surface, path, "an object", value)
    return value


def opt_mapping(surface: str, path: str, value: object) -> Mapping[str, Any] | None:
    return None if value is None else mapping(surface, path, value)


def seq(surface: str, path: str, value: object) -> Sequence[Any]:
    if not isinstance(value, list | tuple):
        raise malformed(surface, path, "a list", value)
    return value


def opt_seq(surface: str, path: str, value: object) -> Sequence[Any] | None:
    return None if value is None else seq(surface, path, value)


def opt_str(surface: str, path: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise malformed(surface, path, "a string or null", value)


def string(surface: str, path: str, value: object) -> str:
    if not isinstance(value, str):
        raise malformed(surface, path, "a string", value)
    return value


def opt_count(surface: str, path: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise malformed(surface, path, "a non-negative integer or null", value)
    return value


def logprob(surface: str, path: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise malformed(surface, path, "a number", value)
    number = float(value)
    if not math.isfinite(number):
        raise malformed(surface, path, "a finite logprob (<= 0)", value)
    if number > LOGPROB_TOLERANCE:
        raise malformed(surface, path, "a logprob <= 0 (a probability of at most 1)", value)
    return min(number, 0.0)


def encodable(text: str | None) -> str | None:
    """A trace that cannot be encoded as UTF-8 (a lone surrogate from a JSON escape) is dropped: it is
    decoration, and a response holding it could not be serialized by the caller."""
    if text is None:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return text
