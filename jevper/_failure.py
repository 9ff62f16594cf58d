"""The one failure policy: what an error says about the server that gave it, whether asking again may be
answered, and after how long.

Everything in jevper that retries or routes around a server asks ``judge``: the client's retry loop
(``_transport``), the System One discovery (``_native``), the several-servers pool (``_upstreams``) and
the harness's verdicts (``probe.classifiers``). Nothing else reads a status or an exception's class to
decide it.

A refusal the wording table (``_wire.errors``) recognised is the request's answer, whatever its status:
llama.cpp's 500 for a system turn after a user turn, or its 501 for a model that is not a decision model,
is never retried and never takes a server out. Timeouts and unreachable servers are recognised by the
exception's type (the standard library's, httpx's, the SDKs', aiohttp's). The SDKs, httpx and aiohttp
are looked up among the modules already imported, never imported here: no exception of theirs exists
before they are.
"""

from __future__ import annotations

import email.utils
import math
import random
import sys
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

from jevper._errors import ConfigError, IncompleteAnswerError, ModelRefusalError, ProviderError

__all__ = [
    "JITTER",
    "RETRY_AFTER_CAP_S",
    "Failure",
    "RetryPolicy",
    "connection_failure",
    "judge",
    "redacted_url",
    "retry_after",
    "retry_delay",
    "server_failure",
    "should_retry",
]

#: What a failure says about the server: ``down`` (take it out for a while), ``busy`` (it asked to wait).
ServerState: TypeAlias = Literal["down", "busy"]
#: A failure before any answer arrived, as ``ProviderError.kind`` names it.
ConnectionFailure: TypeAlias = Literal["timeout", "unreachable"]

#: The longest Retry-After jevper waits; a server asking for more gets its error reported at once.
RETRY_AFTER_CAP_S = 30.0
#: How far the delays of retries that would fall together are spread: questions of one call that meet
#: the same 429 would otherwise all come back at the same instant, and meet it again.
JITTER = 0.25
#: The backoff without a Retry-After: BACKOFF_S, tripled with each retry, up to BACKOFF_CAP_S.
BACKOFF_S = 0.5
BACKOFF_CAP_S = 8.0
#: The most retries a policy may ask for: a request is never asked more than this many times again.
MAX_RETRIES = 10

#: "Not now" from a server that answered: it is down (a proxy or the server says it cannot answer) or
#: busy (it asked the client to come back). A 503 with a Retry-After is busy.
_DOWN = frozenset({408, 502, 503, 504})
_BUSY = frozenset({409, 429})
#: The kind of a refusal the wording table did not recognise: only its status speaks.
_UNRECOGNISED = "other"

#: (module, class) of each library's timeout, then of its connection failure. A timeout is told apart
#: first: the SDKs' APITimeoutError is an APIConnectionError, aiohttp's and the standard library's are
#: OSErrors. The openai and anthropic SDKs send through httpx, or through its fork httpx2 in their
#: later releases; a read of a streamed body raises that library's own error.
_TIMEOUTS = (
    ("httpx", "TimeoutException"),
    ("httpx2", "TimeoutException"),
    ("openai", "APITimeoutError"),
    ("anthropic", "APITimeoutError"),
    ("aiohttp", "ServerTimeoutError"),
)
_UNREACHABLE = (
    ("httpx", "TransportError"),
    ("httpx2", "TransportError"),
    ("openai", "APIConnectionError"),
    ("anthropic", "APIConnectionError"),
    ("aiohttp", "ClientConnectionError"),
)


@dataclass(frozen=True)
class Failure:
    """What one error says.

    ``retry``: the same request, asked again later, may be answered ("not now": refused or reset
    connections, 408, 409, 429, 502, 503, 504). A timeout is not retried: it cost the call its whole
    budget. ``server``: ``down`` (take it out), ``busy`` (it asked to wait) or None (the call's own
    error: another server would answer the same). ``wait``: seconds before asking again, when retried:
    the server's Retry-After, stretched by up to JITTER, or a backoff shortened by up to JITTER; None when
    not retried, or when the server asked for longer than RETRY_AFTER_CAP_S (report the error instead).
    """

    retry: bool
    server: ServerState | None
    wait: float | None


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a request is asked again after a transient failure: a 408, 409, 429,
    502, 503 or 504, a refused or reset connection, or an answer whose ``x-should-retry: true`` header
    asks for it (``false`` forbids a retry whatever the status).

    ``n_retries`` is how many times (0: fail on the first such answer). Before retry number n+1 the
    client waits ``min(base_delay * 3**n, max_delay)`` seconds, shortened by up to JITTER so the
    questions of one call do not all come back at once; with ``respect_retry_after`` a ``Retry-After``
    (seconds or an HTTP date) or ``retry-after-ms`` header replaces that wait (stretched by up to JITTER,
    never shorter), and a server asking for more than RETRY_AFTER_CAP_S gets its error reported at once
    instead of a wait. A timeout is not retried: it has already cost the call its whole budget.
    """

    n_retries: int = 2
    base_delay: float = BACKOFF_S
    max_delay: float = BACKOFF_CAP_S
    respect_retry_after: bool = True

    def __post_init__(self) -> None:
        n = self.n_retries
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_RETRIES:
            raise ConfigError(
                f"RetryPolicy.n_retries: expected an integer from 0 to {MAX_RETRIES}, got {n!r}; "
                "0 fails on the first transient failure"
            )
        for name in ("base_delay", "max_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ConfigError(f"RetryPolicy.{name}: expected a number of seconds >= 0, got {value!r}")
            object.__setattr__(self, name, float(value))
        object.__setattr__(self, "respect_retry_after", bool(self.respect_retry_after))

    def backoff(self, attempt: int) -> float:
        """The wait before retry number ``attempt + 1`` when the server named none, before jitter."""
        return min(self.base_delay * 3.0 ** min(attempt, 64), self.max_delay)


#: The policy of a client given none: the documented defaults.
DEFAULT_POLICY = RetryPolicy()

#: The call's own error.
OWN = Failure(retry=False, server=None, wait=None)
#: The ProviderErrors that are the server's answer, not its failure: the request was answered.
ANSWERED = (ModelRefusalError, IncompleteAnswerError)


def judge(
    error: BaseException,
    attempt: int = 0,
    rand: Callable[[], float] = random.random,
    policy: RetryPolicy = DEFAULT_POLICY,
) -> Failure:
    """What ``error`` says: a ``ProviderError``, an error raised from one, or what a client raised.

    ``attempt`` counts the retries made already (the backoff grows with each, as ``policy`` says);
    ``rand`` draws the jitter, in [0, 1).
    """
    cause = server_failure(error)
    if cause is None:
        kind: str | None = connection_failure(error)
        status, asked, told = None, None, None
    else:
        kind, status, asked, told = cause.kind, cause.status, cause.retry_after, cause.should_retry
    if not policy.respect_retry_after:
        asked = None
    failure = _judged(kind, status, asked, attempt, rand, policy)
    if told is None or told == failure.retry or kind == "timeout":
        return failure
    # The server's x-should-retry outranks what its status says.
    if not told:
        return Failure(retry=False, server=failure.server, wait=None)
    return Failure(retry=True, server=failure.server, wait=retry_delay(attempt, asked, rand, policy))


def _judged(
    kind: str | None,
    status: int | None,
    asked: float | None,
    attempt: int,
    rand: Callable[[], float],
    policy: RetryPolicy,
) -> Failure:
    if kind == "timeout":
        return Failure(retry=False, server="down", wait=None)
    if kind == "unreachable":
        return Failure(retry=True, server="down", wait=retry_delay(attempt, None, rand, policy))
    if kind != _UNRECOGNISED or status is None:
        # The wording table knew it (a 501, a 4xx-like 500): the request's answer, whatever the status.
        return OWN
    if status in _BUSY or (status == 503 and asked is not None):
        server: ServerState = "busy"
    elif status in _DOWN:
        server = "down"
    elif status >= 500 and status != 501:
        # A 500 in words the table does not know: the server may be broken, or it may refuse this request
        # (llama.cpp refuses some so). Taken out, so the call goes elsewhere; not asked again here.
        return Failure(retry=False, server="down", wait=None)
    else:
        return OWN
    if asked is not None and asked > RETRY_AFTER_CAP_S:
        return Failure(retry=True, server=server, wait=None)
    return Failure(retry=True, server=server, wait=retry_delay(attempt, asked, rand, policy))


def retry_delay(
    attempt: int,
    retry_after: float | None,
    rand: Callable[[], float] = random.random,
    policy: RetryPolicy = DEFAULT_POLICY,
) -> float | None:
    """Seconds to wait before retry number ``attempt + 1``: the server's Retry-After, stretched by up to
    JITTER (never shorter than asked; None past RETRY_AFTER_CAP_S: report the error instead), or the
    policy's backoff, shortened by up to JITTER."""
    if retry_after is not None:
        return None if retry_after > RETRY_AFTER_CAP_S else retry_after * (1 + JITTER * rand())
    return policy.backoff(attempt) * (1 - JITTER * rand())


def should_retry(error: BaseException) -> bool | None:
    """The error's ``x-should-retry`` header (``true`` or ``false``), None when absent or another value."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    try:
        value = None if headers is None else headers.get("x-should-retry")
    except (TypeError, AttributeError):
        return None
    return {"true": True, "false": False}.get(str(value).strip().lower()) if value is not None else None


def server_failure(error: BaseException) -> ProviderError | None:
    """The ``ProviderError`` an error is, or was raised from (its ``__cause__`` chain), if any: the label
    readout's corrective retry that found the server gone is a ``LabelReadoutError`` caused by one. A
    model that declined, or an answer cut off by its budget, is an answer the server gave, not its
    failure."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ProviderError) and not isinstance(current, ANSWERED):
            return current
        seen.add(id(current))
        current = current.__cause__
    return None


def connection_failure(error: BaseException) -> ConnectionFailure | None:
    """``timeout`` or ``unreachable`` for an exception of those types (of any HTTP library jevper is
    used with), None for any other."""
    if isinstance(error, (TimeoutError, *_loaded(_TIMEOUTS))):
        return "timeout"
    if isinstance(error, (OSError, *_loaded(_UNREACHABLE))):
        return "unreachable"
    return None


def _loaded(names: tuple[tuple[str, str], ...]) -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = []
    for module, name in names:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def retry_after(error: BaseException) -> float | None:
    """Seconds from the error's Retry-After (or retry-after-ms) header; None when absent or unreadable."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    if headers is None:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            seconds = float(millis) / 1000
        else:
            value = headers.get("retry-after")
            if value is None:
                return None
            try:
                seconds = float(value)
            except ValueError:
                date = email.utils.parsedate_to_datetime(value)
                seconds = date.timestamp() - time.time()
    except (TypeError, ValueError, AttributeError):
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def redacted_url(url: str) -> str:
    """``url`` as a message may name it: without the user name and password it may carry, and with the
    value of each query parameter written as ``***`` (a key may travel there: ``?key=...``). Every message
    built from a server's URL (the connection's failures, the pool's, the gateway's) names it so, at the
    source, so that no failure quoted later (a 502 body, a log line) can carry a secret."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # not a URL urllib can split (a bad IPv6 host): only its scheme and host name
        scheme, _, rest = url.partition("://")
        host = rest.split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]
        return f"{scheme}://{host}/..." if rest else "(a URL that could not be read)"
    host = parts.netloc.rpartition("@")[2]
    query = "&".join(
        f"{name}=***" if sep else "***"
        for name, sep, _ in (pair.partition("=") for pair in parts.query.split("&") if pair)
    )
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, query, ""))
