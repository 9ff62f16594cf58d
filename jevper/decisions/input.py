"""The input of a Decisions request (text, or messages, function and custom tool calls and their outputs)
and its content parts (text, images, JSON), checked as the ``openai`` SDK's types say; and each item as a
turn of the chat-list state jevper asks about: a message as its text, a call or an output as JSON text."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jevper.decisions.checks import Path, checked_text, invalid, obj, one_of, only, required, seq, string

#: The limits of one input_json part, as the SDK's DecisionInputJSON states them.
MAX_JSON_DEPTH, MAX_JSON_VALUES, MAX_JSON_BYTES = 32, 10_000, 256 * 1024


_TEXT_PART = "input_text"
_IMAGE_PART = "input_image"
_JSON_PART = "input_json"


@dataclass(frozen=True)
class Parts:
    """The content parts one place takes, and whether its text and image parts may carry a
    ``prompt_cache_breakpoint`` (the input's do; a question's instructions, in the SDK's
    DecisionQuestionInputPart, do not)."""

    types: tuple[str, ...]
    breakpoints: bool = True


#: The part types each place takes.
QUESTION_PARTS = Parts((_TEXT_PART, _IMAGE_PART, _JSON_PART), breakpoints=False)
_MESSAGE_PARTS: dict[str, Parts] = {
    "user": Parts((_TEXT_PART, _IMAGE_PART, _JSON_PART)),
    "developer": Parts((_TEXT_PART,)),
    "system": Parts((_TEXT_PART,)),
    "assistant": Parts(("output_text", "refusal")),
}
_OUTPUT_PARTS = Parts((_TEXT_PART, _IMAGE_PART))
_TOOL_ITEMS = {
    "function_call": ("arguments", "call_id", "name"),
    "custom_tool_call": ("input", "call_id", "name"),
}
_OUTPUT_ITEMS = {"function_call_output": "function_call", "custom_tool_call_output": "custom_tool_call"}
_STATUSES = ("in_progress", "completed", "incomplete")


def input_items(value: object, images: list[Path]) -> str | tuple[Mapping[str, Any], ...]:
    if isinstance(value, str):
        return string(("input",), value, nonempty=True)
    items = seq(("input",), value, "input")
    if not items:
        raise invalid(("input",), "empty_array", "expected text or at least one message, got an empty list")
    checked: list[Mapping[str, Any]] = []
    calls: dict[str, set[str]] = {kind: set() for kind in _TOOL_ITEMS}
    for i, item in enumerate(items):
        at: Path = ("input", i)
        entry = obj(at, item)
        kind = entry.get("type", "message" if "role" in entry else None)
        if kind is None:
            required(at, entry, "type")
        if kind == "message":
            checked.append(message(at, entry, images))
        elif kind in _TOOL_ITEMS:
            call = _tool_call(at, entry, str(kind))
            calls[str(kind)].add(call["call_id"])
            checked.append(call)
        elif kind in _OUTPUT_ITEMS:
            checked.append(_tool_output(at, entry, str(kind), calls[_OUTPUT_ITEMS[str(kind)]], images))
        else:
            known = ["message", *_TOOL_ITEMS, *_OUTPUT_ITEMS]
            raise invalid((*at, "type"), "invalid_value", f"expected one of {known}, got {kind!r:.80}")
    return tuple(checked)


def message(at: Path, entry: Mapping[str, Any], images: list[Path]) -> dict[str, Any]:
    role = required(at, entry, "role")
    if role not in _MESSAGE_PARTS:
        raise invalid(
            (*at, "role"), "invalid_value", f"expected one of {list(_MESSAGE_PARTS)}, got {role!r:.80}"
        )
    only(at, entry, ("type", "role", "content", *(("phase",) if role == "assistant" else ())))
    message: dict[str, Any] = {"type": "message", "role": role}
    if entry.get("phase") is not None:
        message["phase"] = one_of((*at, "phase"), entry["phase"], ("commentary", "final_answer"))
    content = required(at, entry, "content")
    if isinstance(content, str):
        message["content"] = string((*at, "content"), content)
        return message
    parts = seq((*at, "content"), content, "content")
    if not parts:
        raise invalid(
            (*at, "content"), "empty_array", "expected text or at least one part, got an empty list"
        )
    message["content"] = [
        content_part((*at, "content", j), part, _MESSAGE_PARTS[str(role)], images)[1]
        for j, part in enumerate(parts)
    ]
    return message


def _tool_call(at: Path, entry: Mapping[str, Any], kind: str) -> dict[str, Any]:
    only(at, entry, ("type", *_TOOL_ITEMS[kind], "id", "namespace", "status"))
    call: dict[str, Any] = {"type": kind}
    for name in _TOOL_ITEMS[kind]:
        call[name] = string((*at, name), required(at, entry, name), nonempty=name != _TOOL_ITEMS[kind][0])
    for name in ("id", "namespace"):
        if entry.get(name) is not None:
            call[name] = string((*at, name), entry[name])
    if entry.get("status") is not None:
        call["status"] = one_of((*at, "status"), entry["status"], _STATUSES)
    return call


def _tool_output(
    at: Path, entry: Mapping[str, Any], kind: str, calls: set[str], images: list[Path]
) -> dict[str, Any]:
    only(at, entry, ("type", "call_id", "output", "id", "status"))
    call_id = string((*at, "call_id"), required(at, entry, "call_id"), nonempty=True)
    if call_id not in calls:
        raise invalid(
            (*at, "call_id"),
            "invalid_value",
            f"expected the call_id of a {_OUTPUT_ITEMS[kind]} earlier in the input, got {call_id!r:.80}; "
            "each output must name the call it answers",
        )
    output: dict[str, Any] = {"type": kind, "call_id": call_id}
    given = required(at, entry, "output")
    if isinstance(given, str):
        output["output"] = string((*at, "output"), given)
    else:
        parts = seq((*at, "output"), given, "output")
        output["output"] = [
            content_part((*at, "output", j), part, _OUTPUT_PARTS, images)[1] for j, part in enumerate(parts)
        ]
    if entry.get("id") is not None:
        output["id"] = string((*at, "id"), entry["id"])
    if entry.get("status") is not None:
        output["status"] = one_of((*at, "status"), entry["status"], _STATUSES)
    return output


def content_part(at: Path, value: object, allowed: Parts, images: list[Path]) -> tuple[str, dict[str, Any]]:
    """One content part: the text the model reads for it, and the part as given (checked)."""
    part = obj(at, value)
    kind = required(at, part, "type")
    if kind not in allowed.types:
        raise invalid(
            (*at, "type"), "invalid_value", f"expected one of {list(allowed.types)} here, got {kind!r:.80}"
        )
    mark = ("prompt_cache_breakpoint",) if allowed.breakpoints else ()
    if kind == _IMAGE_PART:
        only(at, part, ("type", "image_url", "detail", *mark))
        checked: dict[str, Any] = {
            "type": kind,
            "image_url": string((*at, "image_url"), required(at, part, "image_url"), nonempty=True),
        }
        if part.get("detail") is not None:
            checked["detail"] = one_of((*at, "detail"), part["detail"], ("low", "high", "auto", "original"))
        _breakpoint(at, part, checked)
        images.append(at)
        return "", checked
    if kind == _JSON_PART:
        only(at, part, ("type", "data"))
        data = _json_data((*at, "data"), required(at, part, "data"))
        return json.dumps(data, ensure_ascii=False), {"type": kind, "data": data}
    field = "refusal" if kind == "refusal" else "text"
    only(at, part, ("type", field, *(mark if kind == _TEXT_PART else ())))
    text = string((*at, field), required(at, part, field))
    checked = {"type": kind, field: text}
    _breakpoint(at, part, checked)
    return text, checked


def _breakpoint(at: Path, part: Mapping[str, Any], checked: dict[str, Any]) -> None:
    mark = part.get("prompt_cache_breakpoint")
    if mark is None:
        return
    there = (*at, "prompt_cache_breakpoint")
    entry = obj(there, mark)
    only(there, entry, ("mode",))
    checked["prompt_cache_breakpoint"] = {
        "mode": one_of((*there, "mode"), required(there, entry, "mode"), ("explicit",))
    }


def _json_data(at: Path, value: object) -> Any:
    """An object or a list of objects, within the part's limits of depth, values and size."""
    if not isinstance(value, Mapping) and not (
        isinstance(value, list) and all(isinstance(item, Mapping) for item in value)
    ):
        raise invalid(at, "invalid_type", f"expected a JSON object or a list of objects, got {value!r:.80}")
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise invalid(at, "invalid_value", f"expected JSON values, got one that is not ({error})") from None
    depth, count = _measure(value)
    size = len(text.encode("utf-8", "surrogatepass"))
    if depth > MAX_JSON_DEPTH or count > MAX_JSON_VALUES or size > MAX_JSON_BYTES:
        raise invalid(
            at,
            "invalid_value",
            f"expected at most {MAX_JSON_DEPTH} levels, {MAX_JSON_VALUES} values and {MAX_JSON_BYTES} bytes "
            f"of compact JSON, got {depth} levels, {count} values and {size} bytes",
        )
    checked_text(at, text)
    checked: Any = json.loads(text)
    return checked


def _measure(value: object, depth: int = 1) -> tuple[int, int]:
    """The container depth and the number of values of a JSON value."""
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else None
    if items is None:
        return depth - 1, 1
    deepest, count = depth, 1
    for item in items:
        inner, counted = _measure(item, depth + 1)
        deepest, count = max(deepest, inner), count + counted
    return deepest, count


def turn(item: Mapping[str, Any]) -> dict[str, str]:
    """One input item as a turn of the chat-list state: a message as its text, every call and output as
    JSON text (the assistant made the call; the output comes back to it)."""
    kind = item["type"]
    if kind != "message":
        role = "assistant" if kind in _TOOL_ITEMS else "user"
        return {"role": role, "content": json.dumps(dict(item), ensure_ascii=False)}
    content = item["content"]
    if not isinstance(content, str):
        content = "\n".join(_part_text(part) for part in content)
    return {"role": item["role"], "content": content}


def _part_text(part: Mapping[str, Any]) -> str:
    if part["type"] == _JSON_PART:
        return json.dumps(part["data"], ensure_ascii=False)
    return str(part.get("text", part.get("refusal", "")))
