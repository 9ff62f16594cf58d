"""Where jevper touches the caller's client: one create() per prompt surface, and the way back; the retry
loop and the bounded body read, which the generic routes (jevper._routes: System One, the model list)
share.

The SDKs are duck-typed, never imported: a response is anything with ``model_dump()``/``to_dict()``
or a mapping, and an SDK error is recognised by its ``status_code`` and ``response`` attributes.

Retries are jevper's, not the SDK's: a client with ``with_options`` and ``max_retries`` (the openai and
anthropic SDKs) is asked with its own retries off, and jevper retries as many times as the client's
``retry=RetryPolicy(...)`` says, or, without one, as the caller's ``max_retries`` says (at most
MAX_RETRIES), only for a transient failure, honouring ``Retry-After`` up to RETRY_AFTER_CAP_S. The
SDKs would otherwise retry a timeout (tripling a hang) and, in one of them,
wait out any ``Retry-After`` however long. Which failure is retried, and after how long, is the one failure
policy's (jevper._failure).

Both clients read the body through the SDK's ``with_streaming_response``, so the timeout bounds the
whole answer (a slow drip, too: a watchdog for the blocking client, ``asyncio.timeout`` for the async
one) and MAX_BODY_BYTES its size; a client without it gets ``timeout=`` and is trusted with it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from jevper import _deadline, _usage
from jevper._errors import MalformedAnswerError, ModelRefusalError, ProviderError
from jevper._failure import (
    DEFAULT_POLICY,
    RETRY_AFTER_CAP_S,
    RetryPolicy,
    connection_failure,
    judge,
    retry_after,
    should_retry,
)
from jevper._wire import PROMPT_RECORDS, PromptSurface, WireResult, build, provider_error, read, read_error
from jevper._wire.request import WireRequest


@dataclass(frozen=True)
class Sending:
    """What travels with every request of a client besides its body: the caller's own headers, the
    sampling temperature (None: the server's), and the retry policy (None: the SDK client's
    ``max_retries``, with jevper's retries in place of the SDK's)."""

    headers: Mapping[str, str] = field(default_factory=dict, repr=False)  # a value may be a key
    temperature: float | None = None
    policy: RetryPolicy | None = None

    def retries(self, sdk_retries: int) -> int:
        return sdk_retries if self.policy is None else self.policy.n_retries


PLAIN = Sending()


def prepare(
    client: object,
    surface: PromptSurface,
    request: WireRequest,
    timeout: float,
    *,
    streaming: bool = False,
    sending: Sending = PLAIN,
) -> tuple[Callable[..., Any], dict[str, Any], bool]:
    """The bound create() of ``surface``, its keyword arguments, and whether it streams the body.

    Where the client offers ``with_streaming_response`` (asked for by ``streaming``) or
    ``with_raw_response`` (the openai and anthropic SDKs offer both), that create() is used: the body is
    then read once, as JSON, instead of being built into SDK objects and dumped back.
    """
    resource_path = PROMPT_RECORDS[surface].sdk_resource
    sdk_path = ".".join((*resource_path, "create"))
    resource: Any = client
    for name in resource_path:
        resource = getattr(resource, name, None)
    create: Any = None
    for wrapper in ("with_streaming_response", "with_raw_response") if streaming else ("with_raw_response",):
        wrapped = getattr(resource, wrapper, None) if resource is not None else None
        create = getattr(wrapped, "create", None) if wrapped is not None else None
        if callable(create):
            streamed = wrapper == "with_streaming_response"
            break
    if not callable(create):
        streamed = False
        create = getattr(resource, "create", None) if resource is not None else None
    if not callable(create):
        raise ProviderError(
            f"{surface}: expected the client to have {sdk_path}(), got "
            f"{type(client).__name__} without it; pass an openai or anthropic client, "
            "or choose another api=",
            status=None,
            server_message=f"{type(client).__name__} has no {sdk_path}()",
            kind="missing_route",
        )
    body = build(surface, request)
    if sending.temperature is not None and "temperature" not in request.extra_body:
        body["temperature"] = sending.temperature
    keywords = PROMPT_RECORDS[surface].keywords
    kwargs = {key: value for key, value in body.items() if key in keywords}
    extra = {key: value for key, value in body.items() if key not in keywords}
    if extra:
        kwargs["extra_body"] = extra
    kwargs["timeout"] = timeout
    if sending.headers:
        kwargs["extra_headers"] = dict(sending.headers)
    return create, kwargs, streamed


#: The most retries jevper makes for one request, whatever the caller's client allows.
MAX_RETRIES = 5
#: The largest response body jevper reads: far above an answer with logprobs over a long reasoning
#: trace, and a bound on the memory a runaway or hostile server can take (about twice this at most).
MAX_BODY_BYTES = 32 * 1024 * 1024


def send(
    client: object, surface: PromptSurface, request: WireRequest, timeout: float, sending: Sending = PLAIN
) -> WireResult:
    target, retries = without_sdk_retries(client)
    create, kwargs, streamed = prepare(target, surface, request, timeout, streaming=True, sending=sending)

    def attempt() -> object:
        return whole_body(create, kwargs, surface, timeout) if streamed else create(**kwargs)

    answered = retried(attempt, surface, request.model, sending.retries(retries), timeout, sending.policy)
    return _read(surface, answered, request.model)


T = TypeVar("T")


def retried(
    attempt: Callable[[], T],
    label: str,
    model: str,
    retries: int,
    timeout: float,
    policy: RetryPolicy | None = None,
) -> T:
    """``attempt()``, tried again after a transient failure as ``_retry`` decides; errors translated."""
    tried = 0
    while True:
        try:
            return attempt()
        except MalformedAnswerError:
            raise
        except Exception as exc:
            error, wait = _retry(exc, label, model, tried, retries, timeout, policy)
            if wait is None:
                _raise(error, exc)
            time.sleep(wait)
            tried += 1
            _usage.retried()


async def retried_async(
    attempt: Callable[[], Awaitable[T]],
    label: str,
    model: str,
    retries: int,
    timeout: float,
    policy: RetryPolicy | None = None,
) -> T:
    """``retried`` for a coroutine."""
    tried = 0
    while True:
        try:
            return await attempt()
        except MalformedAnswerError:
            raise
        except Exception as exc:
            error, wait = _retry(exc, label, model, tried, retries, timeout, policy)
            if wait is None:
                _raise(error, exc)
            await asyncio.sleep(wait)
            tried += 1
            _usage.retried()


def _raise(error: Exception, caught: Exception) -> NoReturn:
    """Raise the translated error, caused by what was caught; an error raised as it came keeps its own
    cause (``raise error from error`` would make it its own ``__cause__``, a cycle)."""
    if error is caught:
        raise error
    raise error from caught


def whole_body(create: Callable[..., Any], kwargs: dict[str, Any], surface: str, timeout: float) -> bytes:
    """The whole body within ``timeout`` of asking and within MAX_BODY_BYTES, or a typed error."""
    alarm = _deadline.start(timeout)
    body = bytearray()
    complete = False
    # The SDK's timeout bounds the wait for the headers and each read; the alarm bounds the whole, from
    # the headers on (the copy's HTTP client view arms it before the SDK reads an error body by itself).
    armed = _deadline.CURRENT.set(alarm)
    try:
        with create(**kwargs) as response:
            # Already armed by the view for an SDK client; this covers a client the view cannot reach.
            _deadline.watch_response(alarm, getattr(response, "http_response", None))
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    raise _too_big(surface)
                if alarm.passed():
                    break
            else:
                complete = True
    except Exception as exc:
        # A read the deadline cut short is a timeout, reported below; so is the SDK's own read timeout
        # once the headers are in and the deadline has passed. Its clock starts at the headers, a moment
        # after the deadline's, so it comes second unless the machine is busy; then it came first
        # (4 test workers on two cores). Anything else is what it is.
        timed_out = connection_failure(exc) == "timeout"
        if not (alarm.fired or (alarm.sock is not None and alarm.passed() and timed_out)):
            raise
    finally:
        _deadline.CURRENT.reset(armed)
        _deadline.stop(alarm)
    if not complete:
        raise ProviderError(
            f"{surface}: expected the whole answer within the {timeout:g} s timeout, got only {len(body)} "
            "bytes of it by then (the server stalled or sent too slowly); raise timeout= or check the server",
            status=None,
            server_message=f"{len(body)} bytes in {timeout:g} s",
            kind="timeout",
        )
    return bytes(body)


async def whole_body_async(create: Callable[..., Any], kwargs: dict[str, Any], surface: str) -> bytes:
    async with create(**kwargs) as response:
        return await read_async(response, surface)


async def read_async(response: Any, surface: str) -> bytes:
    """The whole body of a streamed response, within MAX_BODY_BYTES (the caller bounds the time)."""
    body = bytearray()
    async for chunk in response.iter_bytes():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise _too_big(surface)
    return bytes(body)


def _too_big(surface: str) -> MalformedAnswerError:
    return MalformedAnswerError(
        f"{surface}: expected a response body of at most {MAX_BODY_BYTES // 2**20} MiB, got more; "
        "ask for fewer top_logprobs or a smaller output budget, or check the server"
    )


async def send_async(
    client: object, surface: PromptSurface, request: WireRequest, timeout: float, sending: Sending = PLAIN
) -> WireResult:
    target, retries = without_sdk_retries(client)
    create, kwargs, streamed = prepare(target, surface, request, timeout, streaming=True, sending=sending)

    async def attempt() -> object:
        # The SDK's timeout bounds each read; asyncio.timeout bounds the whole answer (a slow drip, too),
        # in this task (wait_for made a task per request).
        async with asyncio.timeout(timeout):
            if streamed:
                return await whole_body_async(create, kwargs, surface)
            response = create(**kwargs)
            if inspect.isawaitable(response):
                response = await response
            return response

    response = await retried_async(
        attempt, surface, request.model, sending.retries(retries), timeout, sending.policy
    )
    return _read(surface, response, request.model)


def without_sdk_retries(client: object) -> tuple[object, int]:
    """The client with its SDK's own retries off, and how many retries jevper makes in their place."""
    retries = getattr(client, "max_retries", None)
    with_options = getattr(client, "with_options", None)
    if isinstance(retries, int) and not isinstance(retries, bool) and callable(with_options):
        return _no_retry_copy(client, with_options), max(0, min(retries, MAX_RETRIES))
    return client, 0


#: caller's client -> (what the copy was made from, the copy). A copy per request cost 0.05 ms
#: (blocking) and 0.3 ms (async) per question against a loopback server (scripts/bench client).
_COPIES: weakref.WeakKeyDictionary[Any, tuple[tuple[object, ...], object]] = weakref.WeakKeyDictionary()


def _no_retry_copy(client: object, with_options: Callable[..., object]) -> object:
    # A caller who reassigns the key or the URL on their client gets a fresh copy.
    made_from = (getattr(client, "api_key", None), getattr(client, "base_url", None))
    try:
        cached = _COPIES.get(client)
    except TypeError:  # not weakly referenceable: copy every time
        return _copy(client, with_options)
    if cached is not None and cached[0] == made_from:
        return cached[1]
    copy = _copy(client, with_options)
    _COPIES[client] = (made_from, copy)
    return copy


def _copy(client: object, with_options: Callable[..., object]) -> object:
    # The copy sends through a view of the caller's HTTP client that arms the deadline at the headers,
    # before the SDK reads an error body by itself; the caller's client itself is not written to.
    watched = _deadline.watching(getattr(client, "_client", None))
    if watched is None:
        return with_options(max_retries=0)
    return with_options(max_retries=0, http_client=watched)


def _retry(
    exc: Exception,
    surface: str,
    model: str,
    attempt: int,
    retries: int,
    timeout: float,
    policy: RetryPolicy | None = None,
) -> tuple[Exception, float | None]:
    """The error to raise, and the seconds to wait before trying again (None: raise it now)."""
    error = _translated(exc, surface, model, timeout)
    if isinstance(error, ProviderError) and error.retry_after is None:
        # Kept on the error for whoever handles it next (several servers: that server waits, not the others).
        error.retry_after = retry_after(exc)
    if isinstance(error, ProviderError) and error.should_retry is None:
        error.should_retry = should_retry(exc)
    failure = judge(error, attempt, policy=policy or DEFAULT_POLICY)
    if not failure.retry or attempt >= retries:
        return error, None
    if failure.wait is None and isinstance(error, ProviderError) and error.retry_after is not None:
        waited = ProviderError(
            f"{error}; the server asked to retry after {error.retry_after:g} s, longer than the "
            f"{RETRY_AFTER_CAP_S:g} s jevper waits — try again later",
            status=error.status,
            server_message=error.server_message,
            kind=error.kind,
            field=error.field,
            retry_after=error.retry_after,
        )
        return waited, None
    return error, failure.wait


def _read(surface: PromptSurface, response: object, model: str) -> WireResult:
    result = read(surface, as_body(surface, response), model=model)
    if result.refusal is not None:
        raise refused(result)
    return result


def refused(result: WireResult) -> ModelRefusalError:
    """The model declined: an answer, not a failure, so neither retried nor asked again as malformed."""
    said = f"{result.refusal!r}" if result.refusal != result.finish else f"finish {result.finish!r}"
    return ModelRefusalError(
        f"{result.surface}: expected an answer, but the model declined to give one ({said}); the request "
        "was answered, so asking again would get the same: reword the state or the question, or ask "
        "another model",
        server_message=result.refusal or "",
        finish=result.finish,
    )


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
        except ValueError as exc:
            # The SDK handed the body back as it came: the server's answer is not JSON.
            raise MalformedAnswerError(
                f"{surface}: expected a JSON object as the response body, got {response[:80]!r}"
                f"{'...' if len(response) > 80 else ''} ({exc}); check the base_url and the server's log"
            ) from None
        if isinstance(value, Mapping):
            return value
    raise MalformedAnswerError(
        f"{surface}: expected the client to return a response object or a JSON mapping, got "
        f"{type(response).__name__}; pass the SDK client itself, not a streaming or raw wrapper"
    )


def _translated(exc: Exception, surface: str, model: str, timeout: float) -> Exception:
    if isinstance(exc, ProviderError):
        return exc
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return provider_error(read_error(status, _error_body(exc), model=model), surface, model=model)
    failed = connection_failure(exc)
    if failed == "timeout":
        return ProviderError(
            f"{surface}: expected an answer within the {timeout:g} s timeout, got none by then "
            f"({type(exc).__name__}); raise timeout=, lower max_tokens, or check that the server is not "
            "busy with other requests (a one-slot server answers one at a time)",
            status=None,
            server_message=str(exc),
            kind="timeout",
        )
    if failed == "unreachable":
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
