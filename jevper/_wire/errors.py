"""Refusals as each server words them: parse the body once, classify it once, from one table.

The table below is the only place in jevper that looks inside a server's error message. Everything
else asks ``ErrorBody.kind`` and ``ErrorBody.field``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from jevper._errors import ProviderError
from jevper._wire.result import ErrorBody, ErrorShape

#: What a refusal can mean to the client.
ERROR_KINDS = (
    "missing_route",  # the path does not exist on this server: another surface may
    "unknown_model",  # the model id is wrong: no other surface will help
    "logprobs_refused",  # the surface will not carry a distribution
    "field_refused",  # a request field was refused (``field`` names it when the wording does)
    "system_position",  # a system turn after a user turn
    "role_refused",  # a message role the server does not take
    "embedded",  # a 200 whose body is an error
    "not_supported",  # a 501: this server will not answer this request for this model
    "other",
)


@dataclass(frozen=True)
class Wording:
    """One server's way of saying one thing."""

    server: str
    status: int | None  # None: any status
    pattern: re.Pattern[str]
    kind: str
    field: str | None = None  # fixed field name, or None to take the pattern's `field` group


def _w(server: str, status: int | None, pattern: str, kind: str, field: str | None = None) -> Wording:
    return Wording(server, status, re.compile(pattern), kind, field)


# Facts from the reference measurements and from recordings of the embedded llama.cpp; first match wins.
WORDINGS: tuple[Wording, ...] = (
    _w(
        "llama.cpp",
        400,
        r"top_logprobs requires logprobs to be set to true",
        "logprobs_refused",
        "top_logprobs",
    ),
    _w(
        "vLLM",
        400,
        r"when using `top_logprobs`, `logprobs` must be set to true",
        "logprobs_refused",
        "top_logprobs",
    ),
    _w(
        "vLLM",
        400,
        r"Requested sample logprobs of \d+, which is greater than max allowed",
        "field_refused",
        "top_logprobs",
    ),
    _w(
        "vLLM",
        400,
        r"thinking_token_budget is set but reasoning_config is not configured",
        "field_refused",
        "thinking",
    ),
    _w("vLLM", 400, r"(?P<field>n) must be 1 when using greedy sampling", "field_refused"),
    _w("vLLM", 400, r"Parameter '(?P<field>\w+)' must be", "field_refused"),
    _w("llama.cpp", 400, r"^Field '(?P<field>[^']+)'", "field_refused"),
    # llama.cpp answers 500 for a body its JSON library will not take (a field of the wrong type from
    # extra_body): the request's fault, not the server's, whatever the status says.
    _w(
        "llama.cpp",
        500,
        r"^\[json\.exception\.(?:type_error|parse_error|out_of_range)\.\d+\]",
        "field_refused",
    ),
    _w("ollama", 400, r"invalid (?P<field>\w+) value", "field_refused"),
    _w("LM Studio", 400, r"Expected boolean, received number", "field_refused"),
    _w("vLLM", 400, r"(?P<field>max_tokens)=\d+ cannot be greater than", "field_refused"),
    _w("vLLM", 400, r"'loc': 'body\.(?P<field>\w+)", "field_refused"),
    _w("vLLM", 400, r"body\.(?P<field>output_config|thinking)\b", "field_refused"),
    # SGLang 0.5.9 has no `thinking` field on its Messages route and refuses it with a 400 (it accepts
    # output_config); a request model that forbids an unknown field says so in pydantic's words, naming
    # the field by its place in the body. Another 400 that merely mentions thinking is not this.
    _w(
        "SGLang",
        400,
        r"(?is)^(?=.*(?:extra_forbidden|extra inputs are not permitted))"
        r"(?=.*(?:\bbody\.|'body',\s*')(?P<field>thinking)\b)",
        "field_refused",
    ),
    _w("OpenAI", 400, r"Unrecognized request argument supplied: (?P<field>\w+)", "field_refused"),
    _w("vLLM, SGLang, llama.cpp", None, r"System message must be at the beginning", "system_position"),
    _w("SGLang", 400, r"Unexpected message role", "role_refused"),
    _w("ollama", 404, r"model \"[^\"]+\" not found", "unknown_model"),
    _w("vLLM", 404, r"The model `[^`]+` does not exist", "unknown_model"),
    _w("vLLM, SGLang", 404, r"^Not Found$", "missing_route"),
    _w("ollama", 404, r"^404 page not found$", "missing_route"),
    _w("llama.cpp", 404, r"^File Not Found$", "missing_route"),
    _w("LM Studio", 200, r"^Unexpected endpoint or method", "embedded"),
    _w("llama.cpp", 501, r"^This model is not a decision model$", "not_supported"),
)


def read_error(status: int | None, body: bytes | str, *, model: str | None = None) -> ErrorBody:
    """Parse and classify a refusal body of any shape; never raises on a strange body."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    shape, message = _parse(text)
    named = ErrorBody(
        status,
        message,
        shape,
        _names(message, model),
        field=_named(text, "field"),
        param=_named(text, "param"),
    )
    return classify(named)


def embedded_error(body: Mapping[str, Any], *, model: str | None = None) -> ErrorBody | None:
    """A 200 body that is an error in disguise (LM Studio's unknown path, a proxy's failure)."""
    # Responses bodies carry "error": null on success; only a truthy error counts.
    if not body.get("error") or body.get("choices") or body.get("content"):
        return None
    shape, message = _from_object(dict(body))
    return classify(ErrorBody(200, message, shape, _names(message, model)))


def raise_embedded(surface: str, body: Mapping[str, Any], *, model: str | None = None) -> None:
    """Raise the ProviderError that a 200 body carrying an error stands for; return for an answer."""
    error = embedded_error(body, model=model)
    if error is not None:
        failure = provider_error(error, surface)
        failure.status_code = embedded_status(body) or failure.status_code
        raise failure


def embedded_status(body: Mapping[str, Any]) -> int | None:
    """The HTTP status an upstream's error carried in a 200 body names (``{"error": {"code": 502}}``, as
    routers send it), when it names one."""
    error = body.get("error")
    for key in ("code", "status", "status_code"):
        value = error.get(key) if isinstance(error, Mapping) else None
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
    return None


def classify(error: ErrorBody) -> ErrorBody:
    for wording in WORDINGS:
        if wording.status is not None and error.status is not None and wording.status != error.status:
            continue
        found = wording.pattern.search(error.message)
        if found:
            field = wording.field or found.groupdict().get("field") or error.field
            return replace(error, kind=wording.kind, field=field, server=wording.server)
    if error.status == 404:
        return replace(error, kind="unknown_model" if error.names_model else "missing_route")
    if error.status == 501:
        return replace(error, kind="not_supported")
    return error


def _names(message: str, model: str | None) -> bool:
    return model is not None and model != "" and model in message


def _parse(text: str) -> tuple[ErrorShape, str]:
    if not text.strip():
        return "empty", ""
    try:
        value = json.loads(text)
    except ValueError:
        return "text", text.strip()
    if isinstance(value, str):
        return "string", value
    if isinstance(value, Mapping):
        return _from_object(dict(value))
    return "text", text.strip()


def _named(text: str, key: str) -> str | None:
    """The field an error object names itself: laya-serve's ``{"error": {"message", "field"}}``, or the
    ``param`` of OpenAI's envelope (``{"error": {"message", "type", "param", "code"}}``)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    error = value.get("error") if isinstance(value, Mapping) else None
    field = error.get(key) if isinstance(error, Mapping) else None
    return field if isinstance(field, str) and field else None


def _from_object(value: dict[str, Any]) -> tuple[ErrorShape, str]:
    error = value.get("error")
    if isinstance(error, Mapping):
        message = error.get("message")
        return "object", message if isinstance(message, str) else _compact(error)
    if isinstance(error, str):
        return "object", error
    detail = value.get("detail")
    if isinstance(detail, str):
        return "detail", detail
    if isinstance(detail, Mapping) and isinstance(detail.get("message"), str):
        # System One's own: {"detail": {"error_type": ..., "message": ...}}.
        return "detail", detail["message"]
    if isinstance(detail, list):
        # FastAPI validation errors: a list of {"loc": [...], "msg": "..."}.
        parts = [
            f"{'.'.join(str(p) for p in d.get('loc', ()))}: {d.get('msg', '')}"
            if isinstance(d, Mapping)
            else str(d)
            for d in detail
        ]
        return "detail", "; ".join(parts)
    message = value.get("message")
    if isinstance(message, str):
        return "object", message
    return "object", _compact(value)


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))[:2000]


_ADVICE = {
    "missing_route": "this server has no such route; use another api= surface (api='auto' finds one)",
    "unknown_model": "check the model= id against the server's /v1/models",
    "logprobs_refused": "this surface carries no logprobs here; use api='chat_completions' or "
    "method='structured'",
    "field_refused": "the server refused a request field; remove or correct it (extra_body is sent as given)",
    "system_position": "keep system turns first; jevper folds a state's system turns into its own",
    "role_refused": "keep state turns to the system, user and assistant roles",
    "embedded": "the server answered 200 with an error body; check the base_url and the route",
    "not_supported": "the server does not answer this request for this model; use another api= surface",
    "other": "see the server's words above",
}
#: Advice where the System One route reads a refusal differently; {model} is the model asked for.
_SYSTEMONE_ADVICE = {
    "not_supported": "{model!r} is not a decision model here, so System One cannot answer it; ask it "
    "through api='chat_completions', 'responses' or 'messages' (api='auto' finds the surface)",
    "missing_route": "this server has no System One route (llama.cpp before b11361, a server that only "
    "speaks chat); ask through api='chat_completions', 'responses' or 'messages', or api='auto'",
    "other": "the server's words above say what it refused; jevper checks the API's stated limits before "
    "sending, so look for this server's own (the model id, a field from extra_body, a narrower limit)",
}
#: Refusals of a field whose fix is not to remove it.
_FIELD_ADVICE = {
    "max_tokens": "the server refused the output budget (its words say why, e.g. a context smaller than "
    "its default budget); set extra_body={'max_tokens': n} within the limit it names",
}


def provider_error(error: ErrorBody, surface: str, *, model: str | None = None) -> ProviderError:
    """The ProviderError for a classified refusal, worded for the caller (``model``: the model asked for)."""
    status = "answered 200 with an error" if error.status == 200 else f"answered {error.status}"
    if error.status is None:
        status = "could not be reached"
    named = f" (field {error.field!r})" if error.field else ""
    message = (
        f"{surface}: expected an answer, but the server {status}{named}: {error.message!r}; "
        f"{_advice(error, surface, model)}"
    )
    return ProviderError(
        message,
        status=error.status,
        server_message=error.message,
        kind=error.kind,
        field=error.field,
        param=error.param,
    )


def _advice(error: ErrorBody, surface: str, model: str | None) -> str:
    if surface == "systemone" and error.status is not None:
        advice = _SYSTEMONE_ADVICE.get(error.kind)
        if advice is None and error.status in (400, 422):
            advice = _SYSTEMONE_ADVICE["other"]
        if advice is not None:
            return advice.format(model=model or "the model")
    return _FIELD_ADVICE.get(error.field or "") or _ADVICE.get(error.kind, _ADVICE["other"])
