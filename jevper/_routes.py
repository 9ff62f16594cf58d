"""Routes the SDKs have no method for (``POST /systemone``, ``GET /models``), reached through the SDK's
own generic request methods, ``post`` and ``get``: the caller's base_url, auth headers, HTTP client and
timeouts apply, as they do to the SDK's own routes.

A request here is bounded and retried exactly like one on a prompt surface (jevper._transport): the
SDK's retries off and jevper's in their place, the whole body within the timeout and MAX_BODY_BYTES,
and every failure translated with the one wording table.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from jevper._errors import MalformedAnswerError, ProviderError
from jevper._transport import (
    PLAIN,
    Sending,
    as_body,
    read_async,
    retried,
    retried_async,
    whole_body,
    without_sdk_retries,
)
from jevper._wire import chat, messages

#: The openai and anthropic SDKs return the response unread, as their ``with_streaming_response``
#: wrappers do, when a request carries this header; ``cast_to=object`` is then never parsed.
_RAW_RESPONSE = {"X-Stainless-Raw-Response": "stream"}


@dataclass(frozen=True)
class Fetch:
    """One request on a generic route: ``route`` is relative to the API root (``systemone``, ``models``)."""

    method: Literal["GET", "POST"]
    route: str
    body: Mapping[str, Any] | None
    model: str
    timeout: float

    @property
    def label(self) -> str:
        """How errors name the request: a POST by its surface (System One, the Decisions API), whose name
        is its route; a GET by its method and route."""
        return self.route if self.method == "POST" else f"GET /{self.route}"


def path(client: object, route: str) -> str:
    """The path of ``route`` relative to the SDK's base_url, next to the SDK's own routes.

    The openai SDK's base_url ends in /v1 and its routes follow it (``/chat/completions``); the anthropic
    SDK's base_url is the server's root and its routes carry the /v1 (``/v1/messages``). An SDK with
    ``messages`` and no ``chat`` is taken to be of the second kind. A route that starts with ``/`` is the
    server's own, from its root (Ollama's ``/api/show``): the base_url's root and the route, absolute.
    """
    if route.startswith("/"):
        root = str(getattr(client, "base_url", "")).partition("?")[0].rstrip("/").removesuffix("/v1")
        return root + route
    messages_only = (
        getattr(client, messages.RECORD.sdk_resource[0], None) is not None
        and getattr(client, chat.RECORD.sdk_resource[0], None) is None
    )
    return f"/v1/{route}" if messages_only else f"/{route}"


def fetch(client: object, request: Fetch, sending: Sending = PLAIN) -> Mapping[str, Any]:
    """The parsed JSON body of ``request``, or a typed error; ``sending``'s headers and policy apply as
    on a prompt surface (its temperature is the body's to carry)."""
    target, retries = without_sdk_retries(client)
    method = _method(target, request)
    kwargs = _kwargs(target, request, sending)
    retries = sending.retries(retries)

    @contextlib.contextmanager
    def opened() -> Iterator[Any]:
        response = method(**kwargs)
        try:
            yield response if callable(getattr(response, "iter_bytes", None)) else _Whole(response, request)
        finally:
            close = getattr(response, "close", None)
            if callable(close):
                close()

    def attempt() -> bytes:
        return whole_body(opened, {}, request.label, request.timeout)

    body = retried(attempt, request.label, request.model, retries, request.timeout, sending.policy)
    return _json_body(request.label, body)


async def fetch_async(client: object, request: Fetch, sending: Sending = PLAIN) -> Mapping[str, Any]:
    """``fetch`` for an async SDK client; ``asyncio.timeout`` bounds the whole body."""
    target, retries = without_sdk_retries(client)
    method = _method(target, request)
    kwargs = _kwargs(target, request, sending)
    retries = sending.retries(retries)

    async def attempt() -> bytes:
        async with asyncio.timeout(request.timeout):
            response = method(**kwargs)
            if inspect.isawaitable(response):
                response = await response
            try:
                streamed = response if callable(getattr(response, "iter_bytes", None)) else None
                return await read_async(streamed or _AsyncWhole(response, request), request.label)
            finally:
                close = getattr(response, "close", None)
                closed = close() if callable(close) else None
                if inspect.isawaitable(closed):
                    await closed

    body = await retried_async(
        attempt, request.label, request.model, retries, request.timeout, sending.policy
    )
    return _json_body(request.label, body)


class _RepeatedKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):  # the rare case: find the key named twice
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return value


#: One decoder for every body (json.loads with a hook builds one per call); the hook compares lengths
#: and looks key by key only for a body that repeats one.
_UNIQUE_KEYS = json.JSONDecoder(object_pairs_hook=_unique)


def _json_body(label: str, raw: bytes) -> Mapping[str, Any]:
    """The body as a JSON object whose every key appears once: a distribution naming an option twice is
    not one, and json.loads alone would keep the second value silently."""
    try:
        value = _UNIQUE_KEYS.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except _RepeatedKey as repeated:
        raise MalformedAnswerError(
            f"{label} response: expected each key once in an object, got {repeated.key!r} twice; the "
            "server's body is ambiguous — report it"
        ) from None
    except ValueError:
        return as_body(label, raw)  # words the error the way every surface does
    return value if isinstance(value, Mapping) else as_body(label, raw)


def _method(client: object, request: Fetch) -> Any:
    name = request.method.lower()
    method = getattr(client, name, None)
    if not callable(method):
        raise ProviderError(
            f"{request.label}: expected the client to have a generic {name}() for {request.method} "
            f"/{request.route} (the openai and anthropic SDKs do), got {type(client).__name__} without it; "
            "pass an openai or anthropic client, or choose a chat surface with api=",
            status=None,
            server_message=f"{type(client).__name__} has no {name}()",
            kind="missing_route",
        )
    return method


def _kwargs(client: object, request: Fetch, sending: Sending) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "path": path(client, request.route),
        "cast_to": object,
        "options": {"timeout": request.timeout, "headers": {**sending.headers, **_RAW_RESPONSE}},
    }
    if request.body is not None:
        kwargs["body"] = request.body
    return kwargs


def _parsed(response: object, request: Fetch) -> bytes:
    """The bytes of a body a client handed back already parsed, rather than as a response."""
    return json.dumps(as_body(request.label, response)).encode()


class _Whole:
    def __init__(self, response: object, request: Fetch) -> None:
        self.body = _parsed(response, request)

    def iter_bytes(self) -> Iterator[bytes]:
        yield self.body


class _AsyncWhole:
    def __init__(self, response: object, request: Fetch) -> None:
        self.body = _parsed(response, request)

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        yield self.body
