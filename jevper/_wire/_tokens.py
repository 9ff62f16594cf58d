"""Reading the OpenAI-style logprob entries both OpenAI surfaces share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jevper._errors import MalformedAnswerError
from jevper._wire import _read as r
from jevper._wire.result import TokenLogprob


def read_entries(surface: str, path: str, entries: Sequence[Any]) -> tuple[TokenLogprob, ...]:
    return tuple(_entry(surface, f"{path}[{i}]", e) for i, e in enumerate(entries))


def _entry(surface: str, path: str, value: object) -> TokenLogprob:
    entry = r.mapping(surface, path, value)
    token = r.string(surface, f"{path}.token", entry.get("token"))
    lp = r.logprob(surface, f"{path}.logprob", entry.get("logprob"))
    alternatives = r.opt_seq(surface, f"{path}.top_logprobs", entry.get("top_logprobs")) or ()
    top: list[tuple[str, float]] = []
    seen: dict[str, object] = {}
    for j, alt_value in enumerate(alternatives):
        alt_path = f"{path}.top_logprobs[{j}]"
        alt = r.mapping(surface, alt_path, alt_value)
        alt_token = r.string(surface, f"{alt_path}.token", alt.get("token"))
        alt_lp = r.logprob(surface, f"{alt_path}.logprob", alt.get("logprob"))
        # Distinct tokens may render to the same text (byte pieces, special tokens with no text); only
        # the same token twice is wrong, so the token id, or else its bytes, tells them apart.
        identity = alt.get("id") if alt.get("id") is not None else alt.get("bytes")
        key = f"{alt_token}\x00{identity!r}"
        if key in seen:
            raise MalformedAnswerError(
                f"{surface} response: expected each alternative once in {path}.top_logprobs, got "
                f"{alt_token!r} twice (at {seen[key]} and {j}); the server's logprob list is not a "
                "distribution — report it, or use method='structured'"
            )
        seen[key] = j
        top.append((alt_token, alt_lp))
    return TokenLogprob(token=token, logprob=lp, top=tuple(top))
