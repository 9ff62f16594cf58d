"""Response bodies the fault server sends: a healthy answer per surface, and the broken ones.

A healthy answer reads as the label "A" (with a real distribution over A, B, C) when logprobs were
asked for, and as a uniform JSON answer over the request's schema when one was sent. Each broken body
is the healthy one with exactly one thing wrong, so a test can tell which fault it caught.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from jevper._wire import PROMPT_RECORDS, PromptSurface, chat, messages, responses

#: The distribution of a healthy label answer: A most likely, then B, then C.
HEALTHY_LOGPROBS: tuple[tuple[str, float], ...] = (("A", -0.2), ("B", -1.9), ("C", -3.4))
#: Stands in for bytes that cannot be written through json.dumps; replaced after encoding.
BAD_UTF8_MARK = "\u2063BAD-UTF8\u2063"
BAD_UTF8 = b"\xc3\x28\xff\xfe"
#: Put in front of a key to write that key twice in one object: the mark is removed after encoding.
DUPLICATE_MARK = "\u2063DUPLICATE\u2063"
TRACE = "The state is about a charge, so the answer is the billing option."


def find_schema(request: Any) -> Mapping[str, Any] | None:
    """The first JSON schema with properties anywhere in the request body (where each surface puts it)."""
    if isinstance(request, Mapping):
        schema = request.get("schema")
        if isinstance(schema, Mapping) and isinstance(schema.get("properties"), Mapping):
            return schema
        values: Any = request.values()
    elif isinstance(request, list):
        values = request
    else:
        return None
    for value in values:
        found = find_schema(value)
        if found is not None:
            return found
    return None


def wants_logprobs(surface: PromptSurface, request: Any) -> bool:
    if not isinstance(request, Mapping):
        return False
    if surface == responses.SURFACE:
        return bool(request.get("top_logprobs")) or responses.LOGPROBS_INCLUDE in (
            request.get("include") or []
        )
    return bool(request.get("logprobs"))


def json_answer(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """A valid answer to a jevper schema: an even split over number fields, the first of any enum."""
    if schema is None:
        return {"answer": "A"}
    properties = schema.get("properties") or {}
    numbers = [k for k, v in properties.items() if isinstance(v, Mapping) and v.get("type") == "number"]
    answer: dict[str, Any] = {}
    for key, spec in properties.items():
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        if kind == "number":
            answer[key] = 0.5 if key == "noul" else round(1 / len(numbers), 6)
        elif kind == "boolean":
            answer[key] = True
        elif kind == "integer":
            answer[key] = 0
        elif isinstance(spec, Mapping) and spec.get("enum"):
            answer[key] = spec["enum"][0]
        else:
            answer[key] = "A"
    return answer


def entry(token: str, logprob: float, top: tuple[tuple[str, float], ...] = ()) -> dict[str, Any]:
    return {
        "token": token,
        "logprob": logprob,
        "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top],
    }


def chat_label() -> dict[str, Any]:
    """The healthy Chat Completions answer (label A, its alternatives), for a scripted server to queue."""
    return Answer(chat.SURFACE, {"logprobs": True}, "m").body()


def healthy_entries() -> list[dict[str, Any]]:
    token, logprob = HEALTHY_LOGPROBS[0]
    return [entry(token, logprob, HEALTHY_LOGPROBS)]


class Answer:
    """The parts of one answer, before they are laid out in a surface's shape."""

    def __init__(self, surface: PromptSurface, request: Any, model: str) -> None:
        self.surface = surface
        self.model = model
        self.logprobs: list[dict[str, Any]] | None = (
            healthy_entries() if wants_logprobs(surface, request) else None
        )
        schema = find_schema(request)
        if not PROMPT_RECORDS[surface].logprobs or (schema is not None and self.logprobs is None):
            self.text = json.dumps(json_answer(schema))
        else:
            self.text = "A"
        self.trace: str | None = None

    def body(self) -> dict[str, Any]:
        return _LAYOUTS[self.surface](self)


def _chat(a: Answer) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": a.text}
    if a.trace is not None:
        message["reasoning_content"] = a.trace
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "stop"}
    if a.logprobs is not None:
        choice["logprobs"] = {"content": a.logprobs}
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion",
        "created": 0,
        "model": a.model,
        "choices": [choice],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
    }


def _responses(a: Answer) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "output_text", "text": a.text, "annotations": []}
    if a.logprobs is not None:
        part["logprobs"] = a.logprobs
    output: list[dict[str, Any]] = []
    if a.trace is not None:
        output.append(
            {
                "type": "reasoning",
                "id": "rs_fault",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": a.trace}],
            }
        )
    output.append(
        {"type": "message", "id": "msg_fault", "role": "assistant", "status": "completed", "content": [part]}
    )
    return {
        "id": "resp_fault",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": a.model,
        "output": output,
        "usage": {"input_tokens": 12, "output_tokens": 1, "total_tokens": 13},
    }


def _messages(a: Answer) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if a.trace is not None:
        content.append({"type": "thinking", "thinking": a.trace, "signature": ""})
    content.append({"type": "text", "text": a.text})
    return {
        "id": "msg_fault",
        "type": "message",
        "role": "assistant",
        "model": a.model,
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 5},
    }


_LAYOUTS: dict[PromptSurface, Callable[[Answer], dict[str, Any]]] = {
    chat.SURFACE: _chat,
    responses.SURFACE: _responses,
    messages.SURFACE: _messages,
}


def encode(body: Any) -> bytes:
    """JSON as a sloppy server writes it: NaN and Infinity as bare words, the bad-UTF-8 mark as bytes, a
    key under the duplicate mark as a second copy of that key."""
    raw = json.dumps(body, ensure_ascii=False, allow_nan=True).encode("utf-8")
    return raw.replace(BAD_UTF8_MARK.encode("utf-8"), BAD_UTF8).replace(DUPLICATE_MARK.encode("utf-8"), b"")


# --- one mutation per body fault ----------------------------------------------------------------------
# Messages carries no logprobs, so its variant of a logprob fault breaks the JSON answer the same way.


def _json_text(a: Answer) -> dict[str, Any] | None:
    """The answer as a JSON object, when it is one (Messages, or a schema without logprobs)."""
    if a.logprobs is not None:
        return None
    try:
        value = json.loads(a.text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and value else None


def _set_logprob(value: float) -> Callable[[Answer], None]:
    def mutate(a: Answer) -> None:
        answer = _json_text(a)
        if answer is not None:
            # A positive logprob's analog in a JSON answer is a negative probability.
            answer[next(iter(answer))] = value if not math.isfinite(value) else -value
            a.text = json.dumps(answer, allow_nan=True)
            return
        # Sent even when logprobs were not asked for: a server may volunteer them.
        token, _ = HEALTHY_LOGPROBS[0]
        a.text = token
        a.logprobs = [entry(token, value, ((token, value), *HEALTHY_LOGPROBS[1:]))]

    return mutate


def _invalid_utf8_content(a: Answer) -> None:
    if _json_text(a) is not None:
        a.text = a.text[:-1] + f', "note": "{BAD_UTF8_MARK}"}}'
    else:
        a.text = a.text + BAD_UTF8_MARK


def _invalid_utf8_trace(a: Answer) -> None:
    a.trace = TRACE + BAD_UTF8_MARK


def _short_logprobs(a: Answer) -> None:
    answer = _json_text(a)
    if answer is not None:
        # The JSON analog: an answer that names fewer options than were asked about.
        a.text = json.dumps({next(iter(answer)): 1.0})
        return
    # A trace the server split off, and a token list that stops before the answer's own token.
    a.text = HEALTHY_LOGPROBS[0][0]
    a.trace = TRACE
    a.logprobs = [entry(t, -0.01, ((t, -0.01), ("x", -5.0))) for t in ("The", " state", " is")]


def _duplicate_alternatives(a: Answer) -> None:
    answer = _json_text(a)
    if answer is not None:
        # The same key twice in one object: json.loads keeps the last, a careful reader should not.
        a.text = "{" + f"{json.dumps(next(iter(answer)))}: 0.9, " + a.text[1:]
        return
    token, logprob = HEALTHY_LOGPROBS[0]
    a.text = token
    a.logprobs = [entry(token, logprob, (HEALTHY_LOGPROBS[0], *HEALTHY_LOGPROBS))]


BodyFault = Callable[[Answer], dict[str, Any]]


def _answer_fault(mutate: Callable[[Answer], None]) -> BodyFault:
    def body(a: Answer) -> dict[str, Any]:
        mutate(a)
        return a.body()

    return body


def _emptied(value: Any) -> BodyFault:
    def body(a: Answer) -> dict[str, Any]:
        out = a.body()
        out[PROMPT_RECORDS[a.surface].answer_list] = value
        return out

    return body


def _embedded_error(a: Answer) -> dict[str, Any]:
    return {
        "error": {"message": "upstream model crashed while generating", "type": "server_error", "code": 500}
    }


BODY_FAULTS: dict[str, BodyFault] = {
    "invalid-utf8-content": _answer_fault(_invalid_utf8_content),
    "invalid-utf8-reasoning": _answer_fault(_invalid_utf8_trace),
    "nan-logprob": _answer_fault(_set_logprob(math.nan)),
    "infinity-logprob": _answer_fault(_set_logprob(math.inf)),
    "positive-logprob": _answer_fault(_set_logprob(0.7)),
    "short-logprobs": _answer_fault(_short_logprobs),
    "duplicate-alternatives": _answer_fault(_duplicate_alternatives),
    "empty-choices": _emptied([]),
    "null-choices": _emptied(None),
    "embedded-error": _embedded_error,
}
