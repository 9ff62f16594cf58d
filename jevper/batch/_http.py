"""The batch core's connection to a server: an SDK-shaped client over aiohttp.

``AsyncSystemOneClient`` asks whatever SDK-shaped object it is handed (jevper._transport duck-types
it). A batch sends many small requests, and there the openai SDK's own work bounds the rate: against
the instant loopback server of ``scripts/bench`` it spends about 1.3 ms of CPU on a request, httpx
1.07 ms of that, where aiohttp spends 0.2 ms. So the batch core hands the client this instead, for
every OpenAI-style server: the prompt surfaces' ``with_streaming_response.create()`` and the generic
``post()``/``get()`` of jevper's own routes, each body read as it arrives. An error status raises with
``status_code`` and a ``response`` carrying the headers and the body, as the SDKs' errors do, so the
one wording table (jevper._wire) reads it and ``Retry-After`` is honoured.

The caller bounds the time (``asyncio.timeout`` around the whole answer, as for an SDK); the session's
own timeouts are a backstop at the same figure.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import aiohttp

#: Bytes read at a time from a body.
CHUNK_BYTES = 64 * 1024
#: The most of an error's body that is read: its message is quoted from its start. (An answer's body is
#: bounded by the client, as an SDK's is.)
ERROR_BODY_BYTES = 1024 * 1024
#: How long an idle connection is kept: under the 5 s after which llama.cpp and Uvicorn close theirs, so
#: a request is never sent on a connection the server is closing.
KEEPALIVE_S = 4.0


class StatusError(Exception):
    """The server answered with an error status (``status_code``; ``response`` holds the body)."""

    def __init__(self, status_code: int, response: ErrorResponse) -> None:
        super().__init__(f"HTTP {status_code}: {response.content[:200]!r}")
        self.status_code = status_code
        self.response = response


@dataclass(frozen=True)
class ErrorResponse:
    headers: Mapping[str, str]
    content: bytes


class ServerUnreachableError(ConnectionError):
    """The server refused or dropped the connection; the message says how (aiohttp's words)."""


class HTTPClient:
    """What ``AsyncSystemOneClient`` asks of an SDK, for one OpenAI-style server at ``base_url``.

    ``base_url`` is the API root the openai SDK takes (``http://host:port/v1``). Made without I/O; the
    session opens on the first request, in the event loop that sends it, and ``close()`` ends it.
    """

    def __init__(self, base_url: str, api_key: str | None = None, *, user_agent: str = "jevper") -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self._headers = {"content-type": "application/json", "accept": "application/json"}
        self._headers["user-agent"] = user_agent
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._proxy = environment_proxy(self.base_url)
        self._session: aiohttp.ClientSession | None = None
        self.chat = SimpleNamespace(completions=_Surface(self, "/chat/completions"))
        self.responses = _Surface(self, "/responses")

    # --- the SDKs' generic methods, as jevper._routes calls them --------------------------------------

    def post(
        self,
        path: str,
        *,
        cast_to: object = None,
        options: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Awaitable[Response]:
        return self.send("POST", path, body, (options or {}).get("timeout"))

    def get(
        self, path: str, *, cast_to: object = None, options: Mapping[str, Any] | None = None
    ) -> Awaitable[Response]:
        return self.send("GET", path, None, (options or {}).get("timeout"))

    @property
    def closed(self) -> bool:
        """No connection is open: never used, or closed."""
        return self._session is None or self._session.closed

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- one request --------------------------------------------------------------------------------

    async def send(
        self, method: str, path: str, body: Mapping[str, Any] | None, timeout: float | None
    ) -> Response:
        """The response to one request, its body unread; an error status raises ``StatusError``."""
        session = self._session or self._open()
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        limits = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        url = self.base_url + path
        for last in (False, True):
            sent_on: dict[str, bool] = {}
            try:
                response = await session.request(
                    method,
                    url,
                    data=data,
                    headers=self._headers,
                    timeout=limits,
                    proxy=self._proxy,
                    trace_request_ctx=sent_on,
                )
                break
            except aiohttp.ServerDisconnectedError as exc:
                # A kept connection that the server closed as the request went out is asked once more on
                # a new one; a new connection closed without an answer is the server's failure.
                if last or not sent_on.get("kept"):
                    raise ServerUnreachableError(f"{method} {url}: the server closed the connection") from exc
            except TimeoutError:
                raise
            except aiohttp.ClientError as exc:
                raise ServerUnreachableError(f"{method} {url}: {exc}") from exc
        if response.status >= 400:
            try:
                content = await _bounded(response)
            finally:
                Response(response).close()
            raise StatusError(response.status, ErrorResponse(response.headers, content))
        return Response(response)

    def _open(self) -> aiohttp.ClientSession:
        # No limit of connections here: the client's max_concurrency bounds a server's requests in
        # flight. No trust_env: it reads ~/.netrc and the proxy variables on a thread for every request
        # (a quarter of the client's time per row); the proxy is found once, at construction.
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
        self._session = aiohttp.ClientSession(connector=connector, trace_configs=[_KEPT])
        return self._session


def environment_proxy(url: str) -> str | None:
    """The proxy the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY) names for ``url``, as the SDKs
    would use it; None for a direct connection."""
    parts = urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy is None or (parts.hostname and urllib.request.proxy_bypass(parts.hostname)):
        return None
    return proxy


async def _on_kept(session: object, context: Any, params: object) -> None:
    context.trace_request_ctx["kept"] = True


#: Marks a request sent on a connection kept from an earlier one.
_KEPT = aiohttp.TraceConfig()
_KEPT.on_connection_reuseconn.append(_on_kept)


class Response:
    """A response whose body is read as it arrives (``iter_bytes``), then ``close()``d."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status
        self.headers = response.headers

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_chunked(CHUNK_BYTES):
                yield chunk
        except aiohttp.ClientPayloadError as exc:
            raise ServerUnreachableError(f"the body broke off: {exc}") from exc
        except aiohttp.ClientConnectionError as exc:
            if isinstance(exc, TimeoutError):
                raise
            raise ServerUnreachableError(f"the connection broke: {exc}") from exc

    def close(self) -> None:
        # A body read to its end leaves the connection for the next request; any other is closed.
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class _Surface:
    """A prompt surface's resource: ``create()`` and ``with_streaming_response.create()`` alike."""

    def __init__(self, client: HTTPClient, path: str) -> None:
        self._client = client
        self._path = path

    @property
    def with_streaming_response(self) -> _Surface:
        return self

    def create(self, **kwargs: Any) -> _Opened:
        timeout = kwargs.pop("timeout", None)
        extra = kwargs.pop("extra_body", None) or {}
        body = {**kwargs, **extra}
        return _Opened(self._client.send("POST", self._path, body, timeout))


class _Opened:
    """``async with``: the response while the block runs, closed after it."""

    def __init__(self, sending: Awaitable[Response]) -> None:
        self._sending = sending
        self._response: Response | None = None

    async def __aenter__(self) -> Response:
        self._response = await self._sending
        return self._response

    async def __aexit__(self, *exc: object) -> None:
        if self._response is not None:
            self._response.close()


async def _bounded(response: aiohttp.ClientResponse) -> bytes:
    """An error's body, up to ERROR_BODY_BYTES (the rest is not read)."""
    body = bytearray()
    try:
        async for chunk in response.content.iter_chunked(CHUNK_BYTES):
            body += chunk
            if len(body) >= ERROR_BODY_BYTES:
                del body[ERROR_BODY_BYTES:]
                break
    except aiohttp.ClientError:
        pass  # the status is the answer; what of the body came is its detail
    return bytes(body)
