"""OpenAI's Decisions request, validated as the ``openai`` SDK's types say, and mapped onto jevper's
questions and state: the one place that says what a Decisions request may be, for the client's
``decisions.create`` and the gateway's ``POST /v1/decisions`` alike.

``predicate`` becomes a ``Noul``, ``choice`` a ``Choice`` (its values typed: a string and a boolean with the
same text are two values, spelled apart for the model), ``score`` a ``Score`` whose levels read "label:
description". ``input`` (text, or messages, function and custom tool calls and their outputs) becomes the
state: a chat list whose system and developer messages lead, each call and output a turn holding it as
JSON text. A refusal is an ``InvalidDecisionError``: ``param`` names the field as OpenAI's errors do
(``questions[3].choices``), ``code`` says what is wrong, and ``to_api()`` is OpenAI's error envelope.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jevper._errors import InvalidDecisionError, InvalidQuestionError
from jevper.questions import Choice, Noul, Question, Score

__all__ = ["DecisionQuestion", "DecisionRequest", "decision_request", "param"]

DecisionType = Literal["predicate", "choice", "score"]
MIN_QUESTIONS, MAX_QUESTIONS = 1, 400
#: The limits of one input_json part, as the SDK's DecisionInputJSON states them.
MAX_JSON_DEPTH, MAX_JSON_VALUES, MAX_JSON_BYTES = 32, 10_000, 256 * 1024
#: Where a problem sits: ("questions", 3, "choices") is spelled questions[3].choices.
Path = tuple[str | int, ...]

_TEXT_PART = "input_text"
_IMAGE_PART = "input_image"
_JSON_PART = "input_json"
#: The part types each place takes.
_QUESTION_PARTS = (_TEXT_PART, _IMAGE_PART, _JSON_PART)
_MESSAGE_PARTS: dict[str, tuple[str, ...]] = {
    "user": (_TEXT_PART, _IMAGE_PART, _JSON_PART),
    "developer": (_TEXT_PART,),
    "system": (_TEXT_PART,),
    "assistant": ("output_text", "refusal"),
}
_OUTPUT_PARTS = (_TEXT_PART, _IMAGE_PART)
_TOOL_ITEMS = {
    "function_call": ("arguments", "call_id", "name"),
    "custom_tool_call": ("input", "call_id", "name"),
}
_OUTPUT_ITEMS = {"function_call_output": "function_call", "custom_tool_call_output": "custom_tool_call"}
_STATUSES = ("in_progress", "completed", "incomplete")


def param(loc: Path) -> str:
    """A path as OpenAI's errors spell it: ``("questions", 3, "choices")`` is ``questions[3].choices``."""
    spelled = ""
    for part in loc:
        spelled += f"[{part}]" if isinstance(part, int) else (f".{part}" if spelled else part)
    return spelled


def _invalid(at: Path, code: str, problem: str) -> InvalidDecisionError:
    where = param(at) or "the body"
    return InvalidDecisionError(f"{where}: {problem}", param=param(at) or None, code=code, loc=at)


@dataclass(frozen=True)
class DecisionQuestion:
    """One question as the request asked it (``body``, normalized) and as jevper asks it (``question``).

    ``values`` are a choice's values in order, each spelled as ``question``'s option at the same position;
    ``labels`` a score's level labels."""

    name: str | None
    type: DecisionType
    question: Question
    body: Mapping[str, Any]
    values: tuple[str | bool, ...] = ()
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class DecisionRequest:
    """A Decisions request that follows the schema, normalized (plain JSON copies, nothing left unchecked).

    ``input`` holds the caller's instructions, when given, as a leading developer message; ``images`` the
    paths of the image parts, which a surface that reads none refuses (``state``)."""

    model: str
    questions: tuple[DecisionQuestion, ...]
    input: str | tuple[Mapping[str, Any], ...]
    images: tuple[Path, ...] = ()
    prompt_cache_key: str | None = None
    prompt_cache_options: Mapping[str, Any] | None = None
    safety_identifier: str | None = None

    def body(self) -> dict[str, Any]:
        """The request in OpenAI's shape, as POST /v1/decisions takes it; fields not given are left out."""
        body: dict[str, Any] = {
            "model": self.model,
            "input": self.input if isinstance(self.input, str) else [dict(item) for item in self.input],
            "questions": [dict(q.body) for q in self.questions],
        }
        for name in ("prompt_cache_key", "prompt_cache_options", "safety_identifier"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return body

    def state(self, surface: str) -> str | list[dict[str, str]]:
        """The input as the state jevper asks about on ``surface``, which reads text alone: the text, or
        a chat list of {role, content} turns. An image anywhere in the request is refused here, before
        any request, naming the part."""
        if self.images:
            raise _invalid(
                self.images[0],
                "unsupported_value",
                f"expected text and JSON parts, because the {surface} surface reads no images, got an "
                f"input_image ({len(self.images)} image part(s) in the request); drop the image, or ask a "
                "server that answers POST /v1/decisions itself with api='decisions'",
            )
        if isinstance(self.input, str):
            return self.input
        turns = [_turn(item) for item in self.input]
        if all(turn["role"] in ("system", "developer") for turn in turns):
            raise _invalid(
                ("input",),
                "invalid_value",
                "expected at least one user or assistant message, call or output to decide about, got "
                "only system and developer messages",
            )
        return turns


def decision_request(body: Mapping[str, Any], *, instructions: object = None) -> DecisionRequest:
    """The request ``body`` (OpenAI's ``DecisionCreateParams``) checked and normalized, or the
    ``InvalidDecisionError`` of its first problem. ``instructions`` (text or input_text parts, this
    client's addition) lead the input as a developer message."""
    if not isinstance(body, Mapping):
        raise _invalid((), "invalid_type", f"expected a JSON object, got {type(body).__name__}")
    _only(
        (),
        body,
        ("input", "model", "questions", "prompt_cache_key", "prompt_cache_options", "safety_identifier"),
    )
    model = _string(("model",), _required((), body, "model"), nonempty=True)
    images: list[Path] = []
    given_input = _input(_required((), body, "input"), images)
    if instructions is not None:
        lead = _message(("instructions",), {"role": "developer", "content": instructions}, images)
        rest = [{"type": "message", "role": "user", "content": given_input}]
        given_input = (lead, *(rest if isinstance(given_input, str) else given_input))
    questions = _questions(_required((), body, "questions"), images)
    cache_key = _optional_string(body, "prompt_cache_key")
    return DecisionRequest(
        model=model,
        questions=questions,
        input=given_input,
        images=tuple(images),
        prompt_cache_key=cache_key,
        prompt_cache_options=_cache_options(body.get("prompt_cache_options")),
        safety_identifier=_optional_string(body, "safety_identifier"),
    )


# ---- questions -------------------------------------------------------------------------------------------


def _questions(value: object, images: list[Path]) -> tuple[DecisionQuestion, ...]:
    items = _list(("questions",), value, "questions")
    if len(items) < MIN_QUESTIONS:
        raise _invalid(
            ("questions",), "empty_array", "expected 1 to 400 questions, got none; ask at least one"
        )
    if len(items) > MAX_QUESTIONS:
        raise _invalid(
            ("questions",),
            "array_above_max_length",
            f"expected 1 to {MAX_QUESTIONS} questions, got {len(items)}; split them over several requests",
        )
    return tuple(_question(("questions", i), item, images) for i, item in enumerate(items))


def _question(at: Path, value: object, images: list[Path]) -> DecisionQuestion:
    item = _object(at, value)
    kind = _required(at, item, "type")
    if kind not in _BUILDERS:
        raise _invalid(
            (*at, "type"),
            "invalid_value",
            f"expected 'predicate', 'choice' or 'score', got {kind!r:.80}",
        )
    fields = _QUESTION_FIELDS[kind]
    _only(at, item, ("type", "name", "instructions", *fields))
    name = item.get("name")
    if name is not None:
        name = _string((*at, "name"), name)
    body: dict[str, Any] = {"type": kind}
    if name is not None:
        body["name"] = name
    instructions, body["instructions"] = _instructions(
        (*at, "instructions"), _required(at, item, "instructions"), images
    )
    return _BUILDERS[kind](at, item, name, instructions, body)


def _predicate(
    at: Path, item: Mapping[str, Any], name: str | None, text: str, body: dict[str, Any]
) -> DecisionQuestion:
    return DecisionQuestion(name, "predicate", _built(at, lambda: Noul(instructions=text)), body)


def _choice(
    at: Path, item: Mapping[str, Any], name: str | None, text: str, body: dict[str, Any]
) -> DecisionQuestion:
    where = (*at, "choices")
    choices = _list(where, _required(at, item, "choices"), "choices")
    if not Choice.MIN_OPTIONS <= len(choices) <= Choice.MAX_OPTIONS:
        few = len(choices) < Choice.MIN_OPTIONS
        raise _invalid(
            where,
            "array_below_min_length" if few else "array_above_max_length",
            f"expected {Choice.MIN_OPTIONS} to {Choice.MAX_OPTIONS} choices, got {len(choices)}; "
            + ("name every value the answer may take" if few else "split the question"),
        )
    values: list[str | bool] = []
    described: list[str | None] = []
    seen: dict[tuple[bool, str | bool], int] = {}
    listed = []
    for j, choice in enumerate(choices):
        there = (*where, j)
        entry = _object(there, choice)
        _only(there, entry, ("value", "description"))
        value = _required(there, entry, "value")
        if not isinstance(value, str | bool) or (isinstance(value, str) and not value.strip()):
            raise _invalid(
                (*there, "value"),
                "invalid_type" if not isinstance(value, str) else "invalid_value",
                f"expected a non-empty string or a boolean, got {value!r:.80}",
            )
        key = (isinstance(value, bool), value)
        if key in seen:
            raise _invalid(
                (*there, "value"),
                "invalid_value",
                f"expected each value once, got {value!r:.80} again (first at choices[{seen[key]}]); "
                "a string and a boolean with the same text are distinct, the same value twice is not",
            )
        seen[key] = j
        description = entry.get("description")
        if description is not None:
            description = _string((*there, "description"), description)
        values.append(_checked_text((*there, "value"), value) if isinstance(value, str) else value)
        described.append(description)
        listed.append({"value": value, **({} if description is None else {"description": description})})
    body["choices"] = listed
    options = _spelled(values)
    question = _built(at, lambda: Choice(dict(zip(options, described, strict=True)), instructions=text))
    return DecisionQuestion(name, "choice", question, body, values=tuple(values))


def _score(
    at: Path, item: Mapping[str, Any], name: str | None, text: str, body: dict[str, Any]
) -> DecisionQuestion:
    where = (*at, "levels")
    levels = _list(where, _required(at, item, "levels"), "levels")
    if not Score.MIN_LEVELS <= len(levels) <= Score.MAX_LEVELS:
        few = len(levels) < Score.MIN_LEVELS
        raise _invalid(
            where,
            "array_below_min_length" if few else "array_above_max_length",
            f"expected {Score.MIN_LEVELS} to {Score.MAX_LEVELS} levels (lowest first), got {len(levels)}; "
            + ("name every level" if few else "merge levels"),
        )
    labels: list[str] = []
    shown: list[str] = []
    listed = []
    for j, level in enumerate(levels):
        there = (*where, j)
        entry = _object(there, level)
        _only(there, entry, ("label", "description"))
        label = _string((*there, "label"), _required(there, entry, "label"), nonempty=True)
        description = entry.get("description")
        if description is not None:
            description = _string((*there, "description"), description)
        labels.append(label)
        shown.append(label if description is None else f"{label}: {description}")
        listed.append({"label": label, **({} if description is None else {"description": description})})
    body["levels"] = listed
    question = _built(at, lambda: Score(shown, instructions=text))
    return DecisionQuestion(name, "score", question, body, labels=tuple(labels))


_Builder = Callable[[Path, Mapping[str, Any], "str | None", str, dict[str, Any]], DecisionQuestion]
_BUILDERS: dict[object, _Builder] = {"predicate": _predicate, "choice": _choice, "score": _score}
_QUESTION_FIELDS: dict[object, tuple[str, ...]] = {
    "predicate": (),
    "choice": ("choices",),
    "score": ("levels",),
}


def _spelled(values: Sequence[str | bool]) -> list[str]:
    """How the model reads each value: a string as it is, a boolean as JSON spells it, unless a string of
    the question already reads so (then "true (boolean)", and so on until the spelling is free)."""
    taken = {value for value in values if isinstance(value, str)}
    spelled = []
    for value in values:
        if isinstance(value, str):
            spelled.append(value)
            continue
        word, suffix = json.dumps(value), 0
        candidate = word
        while candidate in taken:
            suffix += 1
            candidate = f"{word} (boolean)" if suffix == 1 else f"{word} (boolean {suffix})"
        spelled.append(candidate)
    return spelled


def _built(at: Path, make: Callable[[], Question]) -> Question:
    """A question built by jevper's own rules; a refusal there (text that cannot be sent) is located."""
    try:
        return make()
    except InvalidQuestionError as error:
        raise _invalid(at, "invalid_value", error.problem) from None


def _instructions(at: Path, value: object, images: list[Path]) -> tuple[str, Any]:
    """A question's instructions as the model reads them, and as the request gave them."""
    if isinstance(value, str):
        return _string(at, value, nonempty=True), value
    parts = _list(at, value, "instructions")
    if not parts:
        raise _invalid(at, "empty_array", "expected text or at least one part, got an empty list")
    checked = [_part((*at, i), part, _QUESTION_PARTS, images) for i, part in enumerate(parts)]
    return "\n".join(text for text, _ in checked), [body for _, body in checked]


# ---- input -----------------------------------------------------------------------------------------------


def _input(value: object, images: list[Path]) -> str | tuple[Mapping[str, Any], ...]:
    if isinstance(value, str):
        return _string(("input",), value, nonempty=True)
    items = _list(("input",), value, "input")
    if not items:
        raise _invalid(("input",), "empty_array", "expected text or at least one message, got an empty list")
    checked: list[Mapping[str, Any]] = []
    calls: dict[str, set[str]] = {kind: set() for kind in _TOOL_ITEMS}
    for i, item in enumerate(items):
        at: Path = ("input", i)
        entry = _object(at, item)
        kind = entry.get("type", "message" if "role" in entry else None)
        if kind == "message":
            checked.append(_message(at, entry, images))
        elif kind in _TOOL_ITEMS:
            call = _tool_call(at, entry, str(kind))
            calls[str(kind)].add(call["call_id"])
            checked.append(call)
        elif kind in _OUTPUT_ITEMS:
            checked.append(_tool_output(at, entry, str(kind), calls[_OUTPUT_ITEMS[str(kind)]], images))
        else:
            known = ["message", *_TOOL_ITEMS, *_OUTPUT_ITEMS]
            raise _invalid((*at, "type"), "invalid_value", f"expected one of {known}, got {kind!r:.80}")
    return tuple(checked)


def _message(at: Path, entry: Mapping[str, Any], images: list[Path]) -> dict[str, Any]:
    role = _required(at, entry, "role")
    if role not in _MESSAGE_PARTS:
        raise _invalid(
            (*at, "role"), "invalid_value", f"expected one of {list(_MESSAGE_PARTS)}, got {role!r:.80}"
        )
    _only(at, entry, ("type", "role", "content", *(("phase",) if role == "assistant" else ())))
    message: dict[str, Any] = {"type": "message", "role": role}
    if entry.get("phase") is not None:
        message["phase"] = _one_of((*at, "phase"), entry["phase"], ("commentary", "final_answer"))
    content = _required(at, entry, "content")
    if isinstance(content, str):
        message["content"] = _string((*at, "content"), content)
        return message
    parts = _list((*at, "content"), content, "content")
    if not parts:
        raise _invalid(
            (*at, "content"), "empty_array", "expected text or at least one part, got an empty list"
        )
    message["content"] = [
        _part((*at, "content", j), part, _MESSAGE_PARTS[str(role)], images)[1] for j, part in enumerate(parts)
    ]
    return message


def _tool_call(at: Path, entry: Mapping[str, Any], kind: str) -> dict[str, Any]:
    _only(at, entry, ("type", *_TOOL_ITEMS[kind], "id", "namespace", "status"))
    call: dict[str, Any] = {"type": kind}
    for name in _TOOL_ITEMS[kind]:
        call[name] = _string((*at, name), _required(at, entry, name), nonempty=name != _TOOL_ITEMS[kind][0])
    for name in ("id", "namespace"):
        if entry.get(name) is not None:
            call[name] = _string((*at, name), entry[name])
    if entry.get("status") is not None:
        call["status"] = _one_of((*at, "status"), entry["status"], _STATUSES)
    return call


def _tool_output(
    at: Path, entry: Mapping[str, Any], kind: str, calls: set[str], images: list[Path]
) -> dict[str, Any]:
    _only(at, entry, ("type", "call_id", "output", "id", "status"))
    call_id = _string((*at, "call_id"), _required(at, entry, "call_id"), nonempty=True)
    if call_id not in calls:
        raise _invalid(
            (*at, "call_id"),
            "invalid_value",
            f"expected the call_id of a {_OUTPUT_ITEMS[kind]} earlier in the input, got {call_id!r:.80}; "
            "each output must name the call it answers",
        )
    output: dict[str, Any] = {"type": kind, "call_id": call_id}
    given = _required(at, entry, "output")
    if isinstance(given, str):
        output["output"] = _string((*at, "output"), given)
    else:
        parts = _list((*at, "output"), given, "output")
        output["output"] = [
            _part((*at, "output", j), part, _OUTPUT_PARTS, images)[1] for j, part in enumerate(parts)
        ]
    if entry.get("id") is not None:
        output["id"] = _string((*at, "id"), entry["id"])
    if entry.get("status") is not None:
        output["status"] = _one_of((*at, "status"), entry["status"], _STATUSES)
    return output


def _part(at: Path, value: object, allowed: Sequence[str], images: list[Path]) -> tuple[str, dict[str, Any]]:
    """One content part: the text the model reads for it, and the part as given (checked)."""
    part = _object(at, value)
    kind = _required(at, part, "type")
    if kind not in allowed:
        raise _invalid(
            (*at, "type"), "invalid_value", f"expected one of {list(allowed)} here, got {kind!r:.80}"
        )
    if kind == _IMAGE_PART:
        _only(at, part, ("type", "image_url", "detail", "prompt_cache_breakpoint"))
        checked: dict[str, Any] = {
            "type": kind,
            "image_url": _string((*at, "image_url"), _required(at, part, "image_url"), nonempty=True),
        }
        if part.get("detail") is not None:
            checked["detail"] = _one_of((*at, "detail"), part["detail"], ("low", "high", "auto", "original"))
        _breakpoint(at, part, checked)
        images.append(at)
        return "", checked
    if kind == _JSON_PART:
        _only(at, part, ("type", "data"))
        data = _json_data((*at, "data"), _required(at, part, "data"))
        return json.dumps(data, ensure_ascii=False), {"type": kind, "data": data}
    field = "refusal" if kind == "refusal" else "text"
    _only(at, part, ("type", field, *(("prompt_cache_breakpoint",) if kind == _TEXT_PART else ())))
    text = _string((*at, field), _required(at, part, field))
    checked = {"type": kind, field: text}
    _breakpoint(at, part, checked)
    return text, checked


def _breakpoint(at: Path, part: Mapping[str, Any], checked: dict[str, Any]) -> None:
    mark = part.get("prompt_cache_breakpoint")
    if mark is None:
        return
    there = (*at, "prompt_cache_breakpoint")
    entry = _object(there, mark)
    _only(there, entry, ("mode",))
    checked["prompt_cache_breakpoint"] = {
        "mode": _one_of((*there, "mode"), _required(there, entry, "mode"), ("explicit",))
    }


def _json_data(at: Path, value: object) -> Any:
    """An object or a list of objects, within the part's limits of depth, values and size."""
    if not isinstance(value, Mapping) and not (
        isinstance(value, list) and all(isinstance(item, Mapping) for item in value)
    ):
        raise _invalid(at, "invalid_type", f"expected a JSON object or a list of objects, got {value!r:.80}")
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise _invalid(at, "invalid_value", f"expected JSON values, got one that is not ({error})") from None
    depth, count = _measure(value)
    size = len(text.encode("utf-8", "surrogatepass"))
    if depth > MAX_JSON_DEPTH or count > MAX_JSON_VALUES or size > MAX_JSON_BYTES:
        raise _invalid(
            at,
            "invalid_value",
            f"expected at most {MAX_JSON_DEPTH} levels, {MAX_JSON_VALUES} values and {MAX_JSON_BYTES} bytes "
            f"of compact JSON, got {depth} levels, {count} values and {size} bytes",
        )
    _checked_text(at, text)
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


def _turn(item: Mapping[str, Any]) -> dict[str, str]:
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


def _cache_options(value: object) -> Mapping[str, Any] | None:
    if value is None:
        return None
    at: Path = ("prompt_cache_options",)
    entry = _object(at, value)
    _only(at, entry, ("mode", "ttl"))
    checked: dict[str, Any] = {}
    if entry.get("mode") is not None:
        checked["mode"] = _one_of((*at, "mode"), entry["mode"], ("implicit", "explicit"))
    if "ttl" in entry:
        checked["ttl"] = _one_of((*at, "ttl"), entry["ttl"], ("30m",))
    return checked


# ---- the small checks ------------------------------------------------------------------------------------


def _required(at: Path, entry: Mapping[str, Any], name: str) -> Any:
    if name not in entry or entry[name] is None:
        raise _invalid((*at, name), "missing_required_parameter", f"expected a value, got none; set {name}")
    return entry[name]


def _only(at: Path, entry: Mapping[str, Any], known: Sequence[str]) -> None:
    for name in entry:
        if name not in known:
            raise _invalid(
                (*at, str(name)),
                "unknown_parameter",
                f"expected only {', '.join(known)} here, got the unknown parameter {str(name)!r:.80}",
            )


def _object(at: Path, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _invalid(at, "invalid_type", f"expected an object, got {_kind(value)}")
    return value


def _list(at: Path, value: object, name: str) -> Sequence[Any]:
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Sequence):
        raise _invalid(at, "invalid_type", f"expected {name} to be a list, got {_kind(value)}")
    return value


def _string(at: Path, value: object, *, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        raise _invalid(at, "invalid_type", f"expected a string, got {_kind(value)}")
    if nonempty and not value.strip():
        raise _invalid(at, "invalid_value", "expected a non-empty string, got an empty one")
    return _checked_text(at, value)


def _optional_string(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    return None if value is None else _string((name,), value)


def _one_of(at: Path, value: object, known: Sequence[str]) -> str:
    if value not in known:
        raise _invalid(at, "invalid_value", f"expected one of {list(known)}, got {value!r:.80}")
    return str(value)


def _checked_text(at: Path, value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise _invalid(
            at,
            "invalid_value",
            f"expected text that can be sent as UTF-8, got a lone surrogate at index {error.start}; "
            "decode the text with errors='replace'",
        ) from None
    return value


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool | int | float | str):
        return f"{type(value).__name__} {value!r:.60}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__
