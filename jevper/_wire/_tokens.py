"""Reading the OpenAI-style logprob entries both OpenAI surfaces share.

Every entry is checked; the common, well-formed shape is checked inline, and only an irregular entry
takes the slow path that builds the JSON path for its error message (building those paths up front
was most of a call's own time).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from jevper._errors import MalformedAnswerError
from jevper._wire import _read as r
from jevper._wire.result import TokenLogprob


def read_entries(surface: str, path: str, entries: Sequence[Any]) -> tuple[TokenLogprob, ...]:
    return tuple(_entry(surface, path, i, e) for i, e in enumerate(entries))


_DICT, _STR, _FLOAT = {dict}, {str}, {float}


def _fine(token: object, logprob: object) -> bool:
    return type(token) is str and type(logprob) is float and -math.inf < logprob <= 0.0


def _fast_top(alternatives: list[Any]) -> tuple[tuple[str, float], ...] | None:
    """The alternatives when every one is well formed and no token repeats; None sends them to the slow
    path, which says exactly what is wrong where (and tells repeated tokens apart by id or bytes).

    Checked a list at a time rather than one alternative at a time: the lists of twenty that a server
    sends for every generated token made the per-alternative loop most of the body's reading.
    """
    try:
        tokens = [alt["token"] for alt in alternatives]
        logprobs = [alt["logprob"] for alt in alternatives]
    except (KeyError, TypeError):
        return None
    if set(map(type, alternatives)) != _DICT or set(map(type, tokens)) != _STR:
        return None
    if set(map(type, logprobs)) != _FLOAT or len(set(tokens)) != len(tokens):
        return None
    # A NaN or an infinity makes the sum one (a sum past the floats' range only takes the slow path).
    if not -math.inf < sum(logprobs) or max(logprobs) > 0.0:
        return None
    return tuple(zip(tokens, logprobs, strict=True))


def _pair(surface: str, value: object, where: str, index: int) -> tuple[Any, str, float]:
    """One entry or alternative as (mapping, token, logprob); `where[index]` is its JSON path, built
    only when the entry is irregular and the error needs it."""
    if type(value) is dict and _fine(value.get("token"), value.get("logprob")):
        return value, value["token"], value["logprob"]
    here = f"{where}[{index}]"
    entry = r.mapping(surface, here, value)
    token = r.string(surface, f"{here}.token", entry.get("token"))
    return entry, token, r.logprob(surface, f"{here}.logprob", entry.get("logprob"))


def _entry(surface: str, path: str, i: int, value: object) -> TokenLogprob:
    entry, token, lp = _pair(surface, value, path, i)
    alternatives = entry.get("top_logprobs")
    if alternatives is None:
        return TokenLogprob(token, lp, ())
    if type(alternatives) is not list:
        alternatives = r.seq(surface, f"{path}[{i}].top_logprobs", alternatives)
    else:
        fast = _fast_top(alternatives)
        if fast is not None:
            return TokenLogprob(token, lp, fast)
    top: list[tuple[str, float]] = []
    seen: dict[tuple[str, object], int] = {}
    where = f"{path}[{i}].top_logprobs"
    for j, alt in enumerate(alternatives):
        alt, alt_token, alt_lp = _pair(surface, alt, where, j)
        # Distinct tokens may render to the same text (byte pieces, special tokens with no text); only
        # the same token twice is wrong, so the token id, or else its bytes, tells them apart.
        identity = alt.get("id")
        if identity is None:
            identity = alt.get("bytes")
        # A malformed id or byte list must not make the key unhashable; its text still identifies it.
        key = (alt_token, identity if type(identity) in (int, str) else repr(identity))
        if key in seen:
            raise MalformedAnswerError(
                f"{surface} response: expected each alternative once in {path}[{i}].top_logprobs, got "
                f"{alt_token!r} twice (at {seen[key]} and {j}); the server's logprob list is not a "
                "distribution — report it, or use method='structured'"
            )
        seen[key] = j
        top.append((alt_token, alt_lp))
    return TokenLogprob(token, lp, tuple(top))
