"""jevper's own connection to an OpenAI-style server: an SDK-shaped client over an ``aiohttp.ClientSession``.

``AsyncSystemOneClient`` asks whatever SDK-shaped object it is handed (jevper._transport duck-types
it); the batch core and the gateway hand it this for every OpenAI-style server, because the openai
SDK's work per request bounded a batch's rate and was most of the gateway's own cost per request
(scripts/bench batch, scripts/bench gateway). An ``Observer`` given sees every request sent (the
gateway's metrics and request ids). It offers the prompt surfaces' ``with_streaming_response.create()`` and
the generic ``post()``/``get()`` of jevper's own routes, each body read as it arrives.

aiohttp does the HTTP: kept connections (one pool per server), TLS with the system's authorities
(``SSL_CERT_FILE`` honoured), the environment's proxy as its ``trust_env`` reads it, redirects (the key
dropped on a redirect to another origin), compressed bodies (what it can decode, it names in
``Accept-Encoding``) and its bounds on header lines. This module adds what the core needs besides: a
key that could not travel as a header refused before any byte is sent, a request sent once more when a
kept connection closed under it, an error status raised with ``status_code`` and a ``response`` as the
SDKs raise it (so the one wording table reads it and ``Retry-After`` is honoured), and aiohttp's
failures as the connection errors and timeouts jevper._transport tells apart. A base URL's query string
follows every route (``http://h/v1?api-version=x`` asks ``/v1/chat/completions?api-version=x``); its
user name and password go as basic auth, and together with an API key are refused when the client is
made. Every message names the URL without either, nor the query's values (``_failure.redacted_url``).

The session's own ``trust_env`` is off: it reads the environment and ``~/.netrc`` on a thread at every
request, and a netrc entry for the server's host makes it refuse every request that carries the key.
The proxy is found once per client instead, by the same function of aiohttp's.
"""

from __future__ import annotations

import contextvars
import json
import re
import ssl
import time
import urllib.parse
import weakref
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from jevper import ConfigError
from jevper._failure import redacted_url

#: The most of an error's body that is read: its message is quoted from its start. (An answer's body is
#: bounded by the client, as an SDK's is.)
ERROR_BODY_BYTES = 1024 * 1024
#: How long an idle connection is kept: under the 5 s after which llama.cpp and Uvicorn close theirs, so
#: a request is seldom sent on a connection the server is closing.
KEEPALIVE_S = 4.0
#: Redirects followed for one request, as httpx (the openai SDK's client) follows them.
MAX_REDIRECTS = 20

#: Whether the connection the current request was sent on had carried an earlier one (set per task).
_KEPT: contextvars.ContextVar[bool] = contextvars.ContextVar("jevper_http_kept", default=False)


class Observer(Protocol):
    """What sees each request a client sends (each attempt, a second one on a new connection included)."""

    def headers(self) -> Mapping[str, str]:
        """More headers for the request about to be sent (none of them the key)."""
        ...

    def sent(
        self, method: str, url: str, seconds: float, status: int | None, error: BaseException | None
    ) -> None:
        """The request was answered with ``status`` (its head read) or failed with ``error``."""
        ...


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


class ConnectTimeoutError(TimeoutError):
    """No connection to the server (or its proxy) was made within the timeout."""


class ReadTimeoutError(TimeoutError):
    """The server sent no bytes for as long as the timeout."""


def check_api_key(base_url: str, api_key: str | None) -> None:
    """Refuse a key that cannot travel as an HTTP header, or that comes with credentials in the URL
    (both would be the Authorization header), naming them but never quoting either."""
    if api_key and has_credentials(base_url):
        raise ConfigError(
            f"server {redacted_url(base_url)}: expected the credentials in the URL (user:password@, sent "
            "as basic auth) or an API key (sent as a bearer token), got both; give one of them"
        )
    if api_key is None or (api_key.isascii() and api_key.isprintable()):
        return
    raise ConfigError(
        f"server {redacted_url(base_url)}: expected an api_key of printable ASCII characters (it travels "
        "in the Authorization header), got one with a line break, a control or a non-ASCII character; "
        "strip the key where it is read (a file's trailing newline?)"
    )


def has_credentials(url: str) -> bool:
    """Whether ``url`` carries a user name or password (``http://user:password@host/v1``)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return False
    return parts.username is not None or parts.password is not None


def joined(base_url: str, route: str) -> str:
    """``route`` after the path of ``base_url`` and before its query string: ``http://h/v1?api-version=x``
    and ``/chat/completions`` make ``http://h/v1/chat/completions?api-version=x``."""
    if "://" in route:  # already absolute: a route from the server's root (jevper._routes.path)
        return route
    root, mark, query = base_url.partition("?")
    root = root.rstrip("/")
    if not mark:
        return root + route
    return f"{root}{route}{'&' if '?' in route else '?'}{query}"


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, noting for each request whether its connection is a kept one (``_KEPT``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._used: weakref.WeakSet[object] = weakref.WeakSet()

    async def connect(self, req: Any, traces: Any, timeout: aiohttp.ClientTimeout) -> Any:
        connection = await super().connect(req, traces, timeout)
        protocol = connection.protocol
        _KEPT.set(protocol in self._used)
        self._used.add(protocol)
        return connection


class HTTPClient:
    """What ``AsyncSystemOneClient`` asks of an SDK, for one OpenAI-style server at ``base_url``.

    ``base_url`` is the API root the openai SDK takes (``http://host:port/v1``). Made without I/O; the
    session opens on the first request, in the event loop that sends it, and ``close()`` ends it.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        user_agent: str = "jevper",
        observer: Observer | None = None,
    ) -> None:
        check_api_key(base_url, api_key)
        self._observer = observer
        self.base_url = base_url.rstrip("/")
        #: Each route's URL, and the URL as messages name it (jevper._failure.redacted_url).
        self._urls: dict[str, tuple[str, str]] = {}
        self.api_key = api_key
        self._headers = {"content-type": "application/json", "accept": "application/json"}
        self._headers["user-agent"] = user_agent
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None
        self._proxy: URL | None = None
        self._proxy_headers: dict[str, str] | None = None
        self._timeouts: dict[float | None, aiohttp.ClientTimeout] = {}
        #: The requests sent, each one that went out again on a new connection included.
        self.sent = 0
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
        """No session is open: never used, or closed."""
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
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        url, shown = self._url(path)
        session = self._open()
        waits = self._timeout(timeout)
        headers = self._headers
        if self._observer is not None:
            headers = {**self._observer.headers(), **headers}
        for last in (False, True):
            _KEPT.set(False)
            self.sent += 1
            started = time.perf_counter()
            try:
                answer = await session.request(
                    method,
                    url,
                    data=data,
                    headers=headers,
                    timeout=waits,
                    max_redirects=MAX_REDIRECTS,
                    proxy=self._proxy,
                    proxy_headers=self._proxy_headers,
                )
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # A kept connection that the server closed as the request went out is asked once more on
                # a new one; a new connection closed without an answer is the server's failure.
                failed = failure(exc, method, shown, timeout)
                self._observe(method, shown, started, None, failed)
                if last or not _KEPT.get() or isinstance(exc, aiohttp.ClientConnectorError):
                    raise failed from exc
                continue
            except aiohttp.ClientError as exc:
                failed = failure(exc, method, shown, timeout)
                self._observe(method, shown, started, None, failed)
                raise failed from exc
            self._observe(method, shown, started, answer.status, None)
            break
        coding = answer.headers.get("content-encoding")
        if coding is not None:
            _check_coding(answer, coding, f"{method} {shown}")
        response = Response(answer, method, shown, timeout)
        if answer.status >= 400:
            try:
                content = await _bounded(response)
            finally:
                response.close()
            raise StatusError(answer.status, ErrorResponse(answer.headers, content))
        return response

    def _url(self, path: str) -> tuple[str, str]:
        """The URL of ``path`` on this server, and that URL without its credentials and query values."""
        found = self._urls.get(path)
        if found is None:
            url = joined(self.base_url, path)
            found = self._urls[path] = (url, redacted_url(url))
        return found

    def _observe(
        self, method: str, url: str, started: float, status: int | None, error: BaseException | None
    ) -> None:
        if self._observer is not None:
            self._observer.sent(method, url, time.perf_counter() - started, status, error)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._proxy, self._proxy_headers = environment_proxy(self.base_url)
            connector = _Connector(
                limit=0,  # the client's max_concurrency (the server's slots) bounds the connections
                keepalive_timeout=KEEPALIVE_S,
                ssl=ssl.create_default_context(),  # made now: SSL_CERT_FILE as it is set at first use
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                # No default headers: aiohttp adds them to what it sends a proxy, the key with them.
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return self._session

    def _timeout(self, timeout: float | None) -> aiohttp.ClientTimeout:
        """The caller bounds the whole answer; aiohttp bounds connecting and each wait for bytes alike."""
        waits = self._timeouts.get(timeout)
        if waits is None:
            waits = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
            self._timeouts[timeout] = waits
        return waits


def environment_proxy(url: str) -> tuple[URL | None, dict[str, str] | None]:
    """The proxy the environment names for ``url`` (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, as aiohttp's
    ``trust_env`` reads them) and the headers that carry its credentials; None for a direct connection.

    The credentials go in as ``Authorization``: aiohttp moves that header of the proxy's to the
    Proxy-Authorization of a CONNECT (https) or of the request itself (http); a Proxy-Authorization
    given here would reach only a CONNECT.
    """
    try:
        proxy, auth = get_env_proxy_for_url(URL(url))
    except LookupError:
        return None, None
    return proxy, None if auth is None else {"authorization": auth.encode()}


def failure(exc: aiohttp.ClientError, method: str, url: str, timeout: float | None) -> Exception:
    """aiohttp's error as one jevper._transport tells apart (by its class): unreachable, or a timeout.
    ``url`` is the request's as messages name it (redacted); aiohttp's own words are quoted only where they
    cannot hold the URL."""
    where = f"{method} {url}"
    after = "" if timeout is None else f" within {timeout:g} s"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ConnectTimeoutError(f"{where}: expected a connection to the server{after}, got none")
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return ReadTimeoutError(f"{where}: expected bytes from the server{after}, got none")
    if isinstance(exc, aiohttp.TooManyRedirects):
        return ServerUnreachableError(f"{where}: expected an answer within {MAX_REDIRECTS} redirects")
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return ServerUnreachableError(
            f"{where}: expected the proxy to open a tunnel, got {exc.status} {exc.message}"
        )
    if isinstance(exc, aiohttp.ClientResponseError):  # the answer's head was past aiohttp's parser or bounds
        return ServerUnreachableError(f"{where}: the server's answer could not be read: {exc.message}")
    if isinstance(exc, aiohttp.InvalidURL):  # its words are the URL itself
        return ServerUnreachableError(f"{where}: expected a URL aiohttp can send to ({type(exc).__name__})")
    said = _USERINFO.sub("//", str(exc)) or type(exc).__name__
    return ServerUnreachableError(f"{where}: {said}")


#: A URL's user name and password, as another library's message may quote them.
_USERINFO = re.compile(r"//[^/@\s]+@")


def _check_coding(answer: aiohttp.ClientResponse, coding: str, where: str) -> None:
    """A body in a coding the request did not offer to read is refused (aiohttp would pass it on)."""
    offered = answer.request_info.headers.get("accept-encoding", "")
    if coding.strip().lower() in ("", "identity", *(c.strip() for c in offered.split(","))):
        return
    answer.close()
    raise ServerUnreachableError(
        f"{where}: expected a body in {offered or 'no coding'} (the Accept-Encoding sent) or plain, "
        f"got Content-Encoding {coding!r}"
    )


class Response:
    """A response whose body is read as it arrives (``iter_bytes``), then ``close()``d."""

    def __init__(self, answer: aiohttp.ClientResponse, method: str, url: str, timeout: float | None) -> None:
        self._answer = answer
        self._request = method, url, timeout
        self.status_code = answer.status
        self.headers: Mapping[str, str] = answer.headers

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._answer.content.iter_any():
                yield chunk
        except aiohttp.ClientError as exc:
            raise failure(exc, *self._request) from exc

    def close(self) -> None:
        # A body read to its end leaves the connection for the next request; any other is closed.
        self._answer.release()


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
