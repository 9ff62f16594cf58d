"""The batch core's connection to a server: an SDK-shaped client over HTTP/1.1 connections of its own.

``AsyncSystemOneClient`` asks whatever SDK-shaped object it is handed (jevper._transport duck-types
it). A batch sends many small requests, and there the client's work per request bounds the rate:
against the instant loopback server of ``scripts/bench`` the openai SDK spends about 1.3 ms of CPU on a
request (httpx 1.07 ms of that), aiohttp 0.16-0.2 ms, and this module 0.05 ms. So the batch core hands
the client this, for every OpenAI-style server: the prompt surfaces' ``with_streaming_response.create()``
and the generic ``post()``/``get()`` of jevper's own routes, each body read as it arrives. A connection
is an asyncio protocol whose responses httptools reads (llhttp, the parser Uvicorn uses); what aiohttp
did besides, a batch needs only this much of: kept connections, TLS, the environment's proxy (CONNECT
for https), redirects as the SDK follows them, gzip and deflate bodies. An error status raises with
``status_code`` and a ``response`` carrying the headers and the body, as the SDKs' errors do, so the one
wording table (jevper._wire) reads it and ``Retry-After`` is honoured.

The caller bounds the time (``asyncio.timeout`` around the whole answer, as for an SDK); the connection
bounds each wait for bytes (connecting, the headers, each part of the body) at the same figure.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import socket
import ssl
import time
import urllib.request
import zlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, NamedTuple, cast
from urllib.parse import unquote, urljoin, urlsplit

import httptools

#: The most of an error's body that is read: its message is quoted from its start. (An answer's body is
#: bounded by the client, as an SDK's is.)
ERROR_BODY_BYTES = 1024 * 1024
#: How long an idle connection is kept: under the 5 s after which llama.cpp and Uvicorn close theirs, so
#: a request is never sent on a connection the server is closing.
KEEPALIVE_S = 4.0
#: Body bytes a connection holds unread before it stops reading the socket (it reads again at a quarter).
BUFFER_BYTES = 256 * 1024
#: The most bytes of headers an answer may carry (aiohttp's limit was 8 KiB a line, 32 KiB for all).
HEADER_BYTES = 64 * 1024
#: Bytes a gzip or deflate body is decoded into at a time, so that the client's bound on a body holds.
DECODED_BYTES = 64 * 1024
#: Redirects followed for one request, as httpx (the openai SDK's client) follows them.
MAX_REDIRECTS = 20
#: Request heads kept made, one per method and URL (the client asks a handful of routes).
HEADS_KEPT = 32
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}


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
    """The server refused or dropped the connection, or its answer was not HTTP; the message says how."""


class Headers(Mapping[str, str]):
    """A response's headers by name in any case; a repeated header's values joined by ", " (as httpx's)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._by_name: dict[str, str] = {}
        for name, value in pairs:
            key = name.lower()
            self._by_name[key] = f"{self._by_name[key]}, {value}" if key in self._by_name else value

    def __getitem__(self, name: str) -> str:
        return self._by_name[name.lower()]

    def get(self, name: str, default: Any = None) -> Any:
        return self._by_name.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        return f"Headers({self._by_name!r})"


class _Origin(NamedTuple):
    """Where connections go; a tuple, so the dicts of idle connections find it with a C-level hash."""

    scheme: str
    host: str
    port: int

    @property
    def authority(self) -> str:
        """``host[:port]`` as a Host header says it: the port only when it is not the scheme's own."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"


@functools.lru_cache(maxsize=64)  # every request of a client names one URL or a few
def _split(url: str) -> tuple[_Origin, str]:
    """A URL's origin and its request target (path and query)."""
    parts = urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ServerUnreachableError(f"{url}: expected an http:// or https:// URL with a host")
    origin = _Origin(parts.scheme, parts.hostname, parts.port or _DEFAULT_PORTS[parts.scheme])
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return origin, target


@dataclass(frozen=True)
class _Proxy:
    origin: _Origin
    authorization: str | None

    @classmethod
    def of(cls, url: str) -> _Proxy:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname:
            raise ServerUnreachableError(f"proxy {parts.hostname or url}: expected an http:// proxy URL")
        authorization = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            authorization = "Basic " + base64.b64encode(pair).decode()
        return cls(_Origin("http", parts.hostname, parts.port or 80), authorization)


class _Dropped(Exception):
    """The connection closed before the response's headers arrived."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection, one request at a time: the response's head, then its body as it comes."""

    def __init__(self, origin: _Origin, forget: Callable[[_Connection], None]) -> None:
        self.origin = origin
        self._forget = forget
        self._parser = httptools.HttpResponseParser(self)
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self._head: tuple[int, Headers] | None = None  # the answer's status and headers, once in
        self._pairs: list[tuple[str, str]] = []
        self._header_bytes = 0
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._complete = False
        self._until_close = False
        self._keep_alive = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    # --- asyncio's protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's, under Ray's actors, is not an asyncio.Transport subclass).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ServerUnreachableError(f"the server's answer is not HTTP/1.1: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._forget(self)
        if self._head is None:
            # Closed without a word, it may be a kept connection the server was closing; reset, it broke.
            self._fail(_Dropped() if exc is None else ServerUnreachableError(f"the connection broke: {exc}"))
        elif not self._complete:
            if self._until_close and exc is None:
                self._complete = True  # a body whose end is the connection's end
            else:
                why = exc or "the server closed the connection"
                self._fail(ServerUnreachableError(f"the body broke off: {why}"))
        self._wake()

    def pause_writing(self) -> None:  # a request is small: the socket's buffer takes it whole
        pass

    def resume_writing(self) -> None:
        pass

    # --- httptools' callbacks -------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > HEADER_BYTES:
            self._fail(ServerUnreachableError(f"expected headers of at most {HEADER_BYTES} bytes, got more"))
            return
        self._pairs.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (103 Early Hints): the final one follows
            self._pairs = []
            return
        headers = Headers(self._pairs)
        self._head = status, headers
        self._keep_alive = self._parser.should_keep_alive()
        self._until_close = (
            "content-length" not in headers
            and "chunked" not in headers.get("transfer-encoding", "").lower()
            and status not in (204, 304)
        )
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > BUFFER_BYTES and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._head is not None:
            self._complete = True
            self._wake()

    # --- the exchange ---------------------------------------------------------------------------------

    @property
    def reusable(self) -> bool:
        """The last response was read whole and the server keeps the connection."""
        return self._complete and self._keep_alive and not self.lost and self._error is None

    def send(self, message: bytes) -> None:
        assert self.transport is not None
        self._reset()
        self.transport.write(message)

    async def head(self, timeout: float | None) -> tuple[int, Headers]:
        while True:
            # An error first: one found in the headers leaves the parser to read on to their end.
            if self._error is not None:
                raise self._error
            if self._head is not None:
                return self._head
            await self._wait(timeout)

    async def body(self, timeout: float | None) -> AsyncIterator[bytes]:
        while True:
            while self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._paused and self._buffered <= BUFFER_BYTES // 4 and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                yield chunk
            if self._complete:
                return
            if self._error is not None:
                raise self._error
            await self._wait(timeout)

    def close(self) -> None:
        if self.transport is not None and not self.lost:
            self.transport.close()

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self, timeout: float | None) -> None:
        self._waiter = waiter = self._loop.create_future()
        timer = None if timeout is None else self._loop.call_later(timeout, _time_out, waiter, timeout)
        try:
            await waiter
        except TimeoutError:
            self.close()  # bytes may still come for this request: no later one may read them
            raise
        finally:
            if timer is not None:
                timer.cancel()
            self._waiter = None


def _time_out(waiter: asyncio.Future[None], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError(f"no bytes from the server in {timeout:g} s"))


class HTTPClient:
    """What ``AsyncSystemOneClient`` asks of an SDK, for one OpenAI-style server at ``base_url``.

    ``base_url`` is the API root the openai SDK takes (``http://host:port/v1``). Made without I/O; the
    connections open on the first request, in the event loop that sends it, and ``close()`` ends them.
    """

    def __init__(self, base_url: str, api_key: str | None = None, *, user_agent: str = "jevper") -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self._origin, _ = _split(self.base_url)
        fixed = ["content-type: application/json", "accept: application/json", f"user-agent: {user_agent}"]
        self._fixed = "".join(f"{line}\r\n" for line in fixed)
        self._authorization = f"authorization: Bearer {api_key}\r\n" if api_key else ""
        if not (self._fixed + self._authorization).isascii():
            raise ValueError("api_key and user_agent: expected ASCII text (they travel as HTTP headers)")
        self._proxies: dict[_Origin, _Proxy | None] = {}
        self._heads: dict[tuple[str, str, bool], str] = {}
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._tls: ssl.SSLContext | None = None
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
        """No connection is open: never used, closed, or every one closed by the server."""
        return not self._open

    async def close(self) -> None:
        for connection in list(self._open):
            connection.close()
        self._open.clear()
        self._idle.clear()

    # --- one request --------------------------------------------------------------------------------

    async def send(
        self, method: str, path: str, body: Mapping[str, Any] | None, timeout: float | None
    ) -> Response:
        """The response to one request, its body unread; an error status raises ``StatusError``."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        url = self.base_url + path
        for _ in range(MAX_REDIRECTS + 1):
            connection, status, headers = await self._exchange(method, url, data, timeout)
            response = Response(self, connection, status, headers, timeout)
            location = headers.get("location")
            if status in _REDIRECTS and location:
                await _bounded(response)  # its body is read, so that the connection is kept
                response.close()
                url = urljoin(url, location)
                # As httpx: a 303 is followed by a GET, and so are a 301 and a 302 after a POST.
                if status == 303 or (status in (301, 302) and method == "POST"):
                    method, data = "GET", None
                continue
            if status >= 400:
                try:
                    content = await _bounded(response)
                finally:
                    response.close()
                raise StatusError(status, ErrorResponse(headers, content))
            return response
        raise ServerUnreachableError(f"{method} {url}: expected an answer within {MAX_REDIRECTS} redirects")

    async def _exchange(
        self, method: str, url: str, data: bytes | None, timeout: float | None
    ) -> tuple[_Connection, int, Headers]:
        origin, target = _split(url)
        proxy = self._proxy(origin, url)
        head = self._request_head(method, url, origin, target, proxy, data)
        message = head.encode() if data is None else head.encode() + data
        for last in (False, True):
            connection, kept = await self._connection(origin, proxy, method, url, timeout)
            connection.send(message)
            try:
                status, headers = await connection.head(timeout)
            except ServerUnreachableError as exc:
                raise ServerUnreachableError(f"{method} {url}: {exc}") from exc
            except _Dropped:
                # A kept connection that the server closed as the request went out is asked once more on
                # a new one; a new connection closed without an answer is the server's failure.
                if last or not kept:
                    raise ServerUnreachableError(
                        f"{method} {url}: the server closed the connection"
                    ) from None
                continue
            except BaseException:
                connection.close()
                raise
            return connection, status, headers
        raise AssertionError("unreachable: the second try returns or raises")

    def _request_head(
        self, method: str, url: str, origin: _Origin, target: str, proxy: _Proxy | None, data: bytes | None
    ) -> str:
        """The request's head (each kind of request's is made once, up to the body's length)."""
        key = (method, url, data is not None)
        head = self._heads.get(key)
        if head is None:
            # A proxy for http:// is sent the whole URL; for https:// it only carries the tunnel.
            carrier = proxy if origin.scheme == "http" else None
            line = f"{method} {target if carrier is None else url} HTTP/1.1\r\nhost: {origin.authority}\r\n"
            # The key goes to the server it was given for, never to another that a redirect names.
            keyed = self._authorization if origin == self._origin else ""
            proxied = ""
            if carrier is not None and carrier.authorization:
                proxied = f"proxy-authorization: {carrier.authorization}\r\n"
            head = line + self._fixed + keyed + proxied + ("" if data is None else "content-length: ")
            if len(self._heads) < HEADS_KEPT:  # a server's redirects name what URLs they like
                self._heads[key] = head
        return f"{head}\r\n" if data is None else f"{head}{len(data)}\r\n\r\n"

    def _proxy(self, origin: _Origin, url: str) -> _Proxy | None:
        if origin not in self._proxies:
            found = environment_proxy(url)
            self._proxies[origin] = None if found is None else _Proxy.of(found)
        return self._proxies[origin]

    async def _connection(
        self, origin: _Origin, proxy: _Proxy | None, method: str, url: str, timeout: float | None
    ) -> tuple[_Connection, bool]:
        """A kept connection to ``origin`` (True), or a new one (False)."""
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if not connection.lost and now - connection.idle_since < KEEPALIVE_S:
                return connection, True
            connection.close()
        try:
            async with asyncio.timeout(timeout):
                connection = await self._connect(origin, proxy)
        except OSError as exc:
            raise ServerUnreachableError(f"{method} {url}: cannot connect: {exc}") from exc
        self._open.add(connection)
        return connection, False

    async def _connect(self, origin: _Origin, proxy: _Proxy | None) -> _Connection:
        loop = asyncio.get_running_loop()
        tls = self._tls_context() if origin.scheme == "https" else None

        def made() -> _Connection:
            return _Connection(origin, self._lost)

        if proxy is None:
            _, connection = await loop.create_connection(
                made, origin.host, origin.port, ssl=tls, server_hostname=origin.host if tls else None
            )
        elif tls is None:
            _, connection = await loop.create_connection(made, proxy.origin.host, proxy.origin.port)
        else:
            tunnel = await _tunnel(loop, proxy, origin)
            _, connection = await loop.create_connection(
                made, sock=tunnel, ssl=tls, server_hostname=origin.host
            )
        return connection

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()  # the system's authorities, SSL_CERT_FILE honoured
        return self._tls

    def _lost(self, connection: _Connection) -> None:
        self._open.discard(connection)

    def _release(self, connection: _Connection) -> None:
        """A response is done with: its connection is kept for the next request, or closed."""
        if connection.reusable:
            connection.idle_since = time.monotonic()
            self._idle.setdefault(connection.origin, []).append(connection)
        else:
            connection.close()
            self._open.discard(connection)


async def _tunnel(loop: asyncio.AbstractEventLoop, proxy: _Proxy, origin: _Origin) -> socket.socket:
    """A socket through ``proxy`` to ``origin`` (HTTP CONNECT), ready for TLS."""
    (family, kind, proto, _, address), *_ = await loop.getaddrinfo(
        proxy.origin.host, proxy.origin.port, type=socket.SOCK_STREAM
    )
    sock = socket.socket(family, kind, proto)
    sock.setblocking(False)
    target = f"{origin.host}:{origin.port}"
    lines = [f"CONNECT {target} HTTP/1.1", f"host: {target}"]
    if proxy.authorization:
        lines.append(f"proxy-authorization: {proxy.authorization}")
    try:
        await loop.sock_connect(sock, address)
        await loop.sock_sendall(sock, ("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer and len(answer) < HEADER_BYTES:
            more = await loop.sock_recv(sock, 4096)
            if not more:
                break
            answer += more
        status = answer.split(b"\r\n", 1)[0].decode("latin-1")
        if status.split(" ")[1:2] != ["200"]:
            raise ServerUnreachableError(
                f"proxy {proxy.origin.authority}: expected 200 to CONNECT {target}, "
                f"got {status or 'nothing'!r}"
            )
    except BaseException:
        sock.close()
        raise
    return sock


def environment_proxy(url: str) -> str | None:
    """The proxy the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY) names for ``url``, as the SDKs
    would use it; None for a direct connection."""
    parts = urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy is None or (parts.hostname and urllib.request.proxy_bypass(parts.hostname)):
        return None
    return proxy


class Response:
    """A response whose body is read as it arrives (``iter_bytes``), then ``close()``d."""

    def __init__(
        self,
        client: HTTPClient,
        connection: _Connection,
        status: int,
        headers: Headers,
        timeout: float | None,
    ) -> None:
        self._client: HTTPClient | None = client
        self._connection = connection
        self._timeout = timeout
        self.status_code = status
        self.headers = headers

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        decoder = _decoder(self.headers.get("content-encoding", "identity"))
        async for chunk in self._connection.body(self._timeout):
            if decoder is None:
                yield chunk
                continue
            try:
                while chunk:
                    yield decoder.decompress(chunk, DECODED_BYTES)
                    chunk = decoder.unconsumed_tail
            except zlib.error as exc:
                said = self.headers["content-encoding"]
                raise ServerUnreachableError(f"the body is not the {said} it says it is: {exc}") from exc
        if decoder is not None and not decoder.eof:
            raise ServerUnreachableError(f"the {self.headers['content-encoding']} body ended before its end")

    def close(self) -> None:
        # A body read to its end leaves the connection for the next request; any other is closed.
        if self._client is not None:
            self._client._release(self._connection)
            self._client = None


def _decoder(encoding: str) -> Any:
    """A decoder for the body's Content-Encoding (none is asked for; a server may send gzip anyway)."""
    kind = encoding.strip().lower()
    if kind in ("", "identity"):
        return None
    if kind in ("gzip", "x-gzip"):
        return zlib.decompressobj(wbits=31)
    if kind == "deflate":
        return zlib.decompressobj(wbits=47)  # zlib-wrapped, as the RFC says (or gzip, as some send)
    raise ServerUnreachableError(
        f"expected a body in gzip, deflate or plain, got Content-Encoding {encoding!r}"
    )


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


async def _bounded(response: Response) -> bytes:
    """An error's body, up to ERROR_BODY_BYTES (the rest is not read)."""
    body = bytearray()
    try:
        async for chunk in response.iter_bytes():
            body += chunk
            if len(body) >= ERROR_BODY_BYTES:
                del body[ERROR_BODY_BYTES:]
                break
    except (ConnectionError, TimeoutError):
        pass  # the status is the answer; what of the body came is its detail
    return bytes(body)
