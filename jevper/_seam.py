"""The one place jevper touches the caller's client: one create() per surface, and the way back.

The SDKs are duck-typed, never imported: a response is anything with ``model_dump()``/``to_dict()``
or a mapping, and an SDK error is recognised by its ``status_code`` and ``response`` attributes.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from jevper._errors import MalformedAnswerError, ProviderError
from jevper._wire import Surface, WireResult, build, provider_error, read, read_error
from jevper._wire.request import WireRequest

#: Fields every supported SDK version takes as keywords; everything else travels in extra_body, so
#: an older SDK without, say, ``top_logprobs`` on ``responses.create`` still sends it.
_KEYWORDS: dict[Surface, frozenset[str]] = {
    "chat_completions": frozenset({"model", "messages"}),
    "responses": frozenset({"model", "input"}),
    "messages": frozenset({"model", "messages", "max_tokens", "system"}),
}
_PATHS: dict[Surface, tuple[str, ...]] = {
    "chat_completions": ("chat", "completions", "create"),
    "responses": ("responses", "create"),
    "messages": ("messages", "create"),
}
_UNREACHABLE = frozenset(
    {
        "APIConnectionError",
        "APITimeoutError",
        "TimeoutException",
        "TransportError",
        "TimeoutError",
        "ConnectionError",
    }
)


def prepare(
    client: object, surface: Surface, request: WireRequest, timeout: float
) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The bound create() of ``surface`` and its keyword arguments.

    Where the client offers ``with_raw_response`` (the openai and anthropic SDKs do), its create() is
    used: the body is then read once, as JSON, instead of being built into SDK objects and dumped back.
    """
    resource: Any = client
    for name in _PATHS[surface][:-1]:
        resource = getattr(resource, name, None)
    raw = getattr(resource, "with_raw_response", None) if resource is not None else None
    create = getattr(raw, "create", None) if raw is not None else None
    if not callable(create):
        create = getattr(resource, "create", None) if resource is not None else None
    if not callable(create):
        raise ProviderError(
            f"{surface}: expected the client to have {'.'.join(_PATHS[surface])}(), got "
            f"{type(client).__name__} without it; pass an openai or anthropic client, "
            "or choose another api=",
            status=None,
            server_message=f"{type(client).__name__} has no {'.'.join(_PATHS[surface])}()",
            kind="missing_route",
        )
    body = build(surface, request)
    keywords = _KEYWORDS[surface]
    kwargs = {key: value for key, value in body.items() if key in keywords}
    extra = {key: value for key, value in body.items() if key not in keywords}
    if extra:
        kwargs["extra_body"] = extra
    kwargs["timeout"] = timeout
    return create, kwargs


def send(client: object, surface: Surface, request: WireRequest, timeout: float) -> WireResult:
    create, kwargs = prepare(client, surface, request, timeout)
    try:
        response = create(**kwargs)
    except Exception as exc:
        raise _translated(exc, surface, request.model) from exc
    return _read(surface, response, request.model)


async def send_async(client: object, surface: Surface, request: WireRequest, timeout: float) -> WireResult:
    create, kwargs = prepare(client, surface, request, timeout)
    try:
        response = create(**kwargs)
        if inspect.isawaitable(response):
            response = await response
    except Exception as exc:
        raise _translated(exc, surface, request.model) from exc
    return _read(surface, response, request.model)


def _read(surface: Surface, response: object, model: str) -> WireResult:
    return read(surface, as_body(surface, response), model=model)


def as_body(surface: str, response: object) -> Mapping[str, Any]:
    """The parsed JSON body of a raw SDK response, an SDK response object, a mapping, or JSON text."""
    if isinstance(response, Mapping):
        return response
    http_response = getattr(response, "http_response", None)
    content = getattr(http_response, "content", None)
    if isinstance(content, bytes):
        response = content
    dump = getattr(response, "model_dump", None)
    if callable(dump):
        try:
            # A body the SDK's types do not expect (LM Studio's 200 error) is still the body.
            value = dump(warnings=False)
        except TypeError:
            value = dump()
        if isinstance(value, Mapping):
            return value
    to_dict = getattr(response, "to_dict", None)
    if callable(to_dict):
        value = to_dict()
        if isinstance(value, Mapping):
            return value
    if isinstance(response, str | bytes):
        try:
            value = json.loads(response)
        except ValueError:
            value = None
        if isinstance(value, Mapping):
            return value
    raise MalformedAnswerError(
        f"{surface}: expected the client to return a response object or a JSON mapping, got "
        f"{type(response).__name__}; pass the SDK client itself, not a streaming or raw wrapper"
    )


def _translated(exc: Exception, surface: Surface, model: str) -> Exception:
    if isinstance(exc, ProviderError):
        return exc
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return provider_error(read_error(status, _error_body(exc), model=model), surface)
    if any(cls.__name__ in _UNREACHABLE for cls in type(exc).__mro__):
        return ProviderError(
            f"{surface}: expected an answer, but the server could not be reached ({type(exc).__name__}: "
            f"{exc}); check the base_url, that the server runs, and the timeout",
            status=None,
            server_message=str(exc),
            kind="unreachable",
        )
    return exc


def _error_body(exc: Exception) -> bytes | str:
    response = getattr(exc, "response", None)
    content = getattr(response, "content", None)
    if isinstance(content, bytes | str):
        return content
    body = getattr(exc, "body", None)
    if isinstance(body, str):
        return body
    if body is not None:
        try:
            return json.dumps(body)
        except (TypeError, ValueError):
            pass
    return str(getattr(exc, "message", "") or exc)
