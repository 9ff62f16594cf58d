"""Values that travel as JSON, checked before anything is sent: every string can be written as UTF-8,
every number is finite, every key is a string; an error names where the bad part sits.

The SDKs encode a request body only when it is sent, so a lone surrogate (what ``surrogateescape``
decoding leaves in a string) otherwise surfaces as a UnicodeEncodeError from inside the SDK.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from jevper._errors import InvalidQuestionError

#: A JSON value as Python holds it after ``checked``: dicts, lists, strings, numbers, booleans, None.
Json: TypeAlias = Any


def text(where: str, value: str) -> str:
    """``value``, when it can be sent as UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        around = value[max(0, exc.start - 20) : exc.start + 5]
        raise InvalidQuestionError(
            f"{where}: expected text that can be sent as UTF-8, got a lone surrogate {value[exc.start]!r} "
            f"at index {exc.start} (in {around!r}); decode the text with errors='replace', or fix the "
            "source it came from"
        ) from None
    return value


def checked(where: str, value: object) -> Json:
    """A plain JSON copy of ``value`` (mappings become dicts, sequences lists), or an InvalidQuestionError
    naming the path of the first part that cannot be sent."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return text(where, value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidQuestionError(
                f"{where}: expected a finite number, got {value!r}; JSON has no {value}"
            )
        return value
    if isinstance(value, Mapping):
        copy: dict[str, Json] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidQuestionError(
                    f"{where}: expected string keys (JSON objects have no others), got {key!r}"
                )
            text(f"{where}[{key!r}] (the key)", key)
            copy[key] = checked(f"{where}[{key!r}]", item)
        return copy
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [checked(f"{where}[{i}]", item) for i, item in enumerate(value)]
    raise InvalidQuestionError(
        f"{where}: expected text or a JSON value (object, array, number, boolean), got "
        f"{type(value).__name__}; convert it before asking"
    )


def dumps(value: Json) -> str:
    """The JSON text a model reads for a value that is not a string: compact, non-ASCII kept as is."""
    return json.dumps(value, ensure_ascii=False)
