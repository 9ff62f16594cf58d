"""The small checks of a Decisions request, each refusal an ``InvalidDecisionError`` located as OpenAI's
errors locate it (``param``): shared by the request's questions (``rules``) and its input (``input``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jevper._errors import InvalidDecisionError

#: Where a problem sits: ("questions", 3, "choices") is spelled questions[3].choices.
Path = tuple[str | int, ...]


def param(loc: Path) -> str:
    """A path as OpenAI's errors spell it: ``("questions", 3, "choices")`` is ``questions[3].choices``."""
    spelled = ""
    for part in loc:
        spelled += f"[{part}]" if isinstance(part, int) else (f".{part}" if spelled else part)
    return spelled


def invalid(at: Path, code: str, problem: str) -> InvalidDecisionError:
    where = param(at) or "the body"
    return InvalidDecisionError(f"{where}: {problem}", param=param(at) or None, code=code, loc=at)


def required(at: Path, entry: Mapping[str, Any], name: str) -> Any:
    if name not in entry or entry[name] is None:
        raise invalid((*at, name), "missing_required_parameter", f"expected a value, got none; set {name}")
    return entry[name]


def only(at: Path, entry: Mapping[str, Any], known: Sequence[str]) -> None:
    for name in entry:
        if name not in known:
            raise invalid(
                (*at, str(name)),
                "unknown_parameter",
                f"expected only {', '.join(known)} here, got the unknown parameter {str(name)!r:.80}",
            )


def obj(at: Path, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise invalid(at, "invalid_type", f"expected an object, got {kind(value)}")
    return value


def seq(at: Path, value: object, name: str) -> Sequence[Any]:
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Sequence):
        raise invalid(at, "invalid_type", f"expected {name} to be a list, got {kind(value)}")
    return value


def string(at: Path, value: object, *, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        raise invalid(at, "invalid_type", f"expected a string, got {kind(value)}")
    if nonempty and not value.strip():
        raise invalid(at, "invalid_value", "expected a non-empty string, got an empty one")
    return checked_text(at, value)


def one_of(at: Path, value: object, known: Sequence[str]) -> str:
    if value not in known:
        raise invalid(at, "invalid_value", f"expected one of {list(known)}, got {value!r:.80}")
    return str(value)


def checked_text(at: Path, value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise invalid(
            at,
            "invalid_value",
            f"expected text that can be sent as UTF-8, got a lone surrogate at index {error.start}; "
            "decode the text with errors='replace'",
        ) from None
    return value


def kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool | int | float | str):
        return f"{type(value).__name__} {value!r:.60}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__
