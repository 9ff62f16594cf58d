"""What the gateway tells about itself: request ids, log lines, Prometheus metrics.

Every request has an id: the client's ``x-request-id`` when it sends a usable one, else a new one. It is
returned on the response, sent on to the upstream, and stands in every log line written while the
request is answered (a context variable, read by a logging filter). The metrics live in a registry of
the gateway's own, with labels from bounded sets only (routes, statuses, upstreams, kinds), so their
memory does not grow with the traffic.
"""

from __future__ import annotations

import contextvars
import logging
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jevper._failure import redacted_url
from jevper.decisions import DecisionResponse
from jevper.models import SystemOneResponse

REQUEST_ID = "x-request-id"
#: A client's id is kept when it is this; anything else (too long, spaces, control characters that
#: could forge a log line) is replaced by a new one.
_USABLE_ID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
CONTENT_TYPE = CONTENT_TYPE_LATEST

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("jevper_serve_request_id", default="-")
log = logging.getLogger("jevper.serve")
#: Each request sent to an upstream, at DEBUG.
upstream_log = logging.getLogger("jevper.serve.upstream")


class RequestIdFilter(logging.Filter):
    """Puts the request's id on every record, from whichever logger (httpx's, the client's, ours)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.addFilter(RequestIdFilter())
    # httpx writes a line per request at INFO (the upstream checks', the embedded server's start-up), each
    # naming a URL whole with its query's values: its warnings only, at every level.
    logging.getLogger("httpx").setLevel(logging.WARNING)


_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter(
            "jevper_serve_requests", "Requests answered, by route and status", ["route", "status"], registry=r
        )
        self.latency = Histogram(
            "jevper_serve_request_seconds",
            "Time to answer a request, by route",
            ["route"],
            buckets=_LATENCY,
            registry=r,
        )
        self.in_flight = Gauge(
            "jevper_serve_in_flight", "System One and Decisions requests being answered", registry=r
        )
        self.upstream_requests = Counter(
            "jevper_serve_upstream_requests",
            "Requests sent upstream, by upstream and status ('none' when no answer came)",
            ["upstream", "status"],
            registry=r,
        )
        self.upstream_errors = Counter(
            "jevper_serve_upstream_errors",
            "Upstream requests that failed, by upstream and kind (an HTTP status class or the failure)",
            ["upstream", "kind"],
            registry=r,
        )
        self.upstream_latency = Histogram(
            "jevper_serve_upstream_seconds",
            "Time an upstream took to answer, by upstream",
            ["upstream"],
            buckets=_LATENCY,
            registry=r,
        )
        self.questions = Counter(
            "jevper_serve_questions",
            "Questions answered, by type, method and surface",
            ["type", "method", "surface"],
            registry=r,
        )

        # The shadow (jevper.serve.shadow): by route and question type, never a question's id, which is
        # the client's own text and would grow the registry with the traffic.
        self.shadow_requests = Counter(
            "jevper_serve_shadow_requests",
            "Answered requests handed to the shadow, by route and outcome (answered, failed, dropped)",
            ["route", "outcome"],
            registry=r,
        )
        self.shadow_answers = Counter(
            "jevper_serve_shadow_answers",
            "Answers compared with the shadow's, by route, question type and whether the choice agreed",
            ["route", "type", "agreed"],
            registry=r,
        )
        self.shadow_distance = Histogram(
            "jevper_serve_shadow_distance",
            "Total variation distance between an answer's distribution and the shadow's, by route and type",
            ["route", "type"],
            buckets=(0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0),
            registry=r,
        )
        self.cache = Counter(
            "jevper_serve_cache_lookups",
            "Requests answered with the answer cache (--cache) on, by route and outcome: hit (answered from "
            "the file, nothing sent upstream) or miss (asked upstream; every one under --cache-mode write)",
            ["route", "outcome"],
            registry=r,
        )
        self.shadow_queue = Gauge(
            "jevper_serve_shadow_queue", "Requests waiting to be asked of the shadow upstream", registry=r
        )
        self.escalations = Counter(
            "jevper_serve_escalations",
            "Questions held to --escalate-below, by route and outcome: escalated (answered by the "
            "stronger upstream), kept (the first answer was sure enough) or failed (asked again, the "
            "stronger upstream failed, the first answer given)",
            ["route", "outcome"],
            registry=r,
        )

    def answered(self, response: SystemOneResponse) -> None:
        for answer in response.answers.values():
            self.questions.labels(answer.type, answer.method, answer.surface).inc()

    def decided(self, response: DecisionResponse) -> None:
        """A Decisions answer's questions, counted as System One's are (a refusal by its type)."""
        traces = response.debug.get("questions", {})
        for i, answer in enumerate(response.answers):
            trace = traces.get(f"questions[{i}]", {})
            self.questions.labels(
                answer.type, trace.get("method", "none"), trace.get("surface", "none")
            ).inc()

    def looked_up(self, route: str, debug: Mapping[str, Any]) -> None:
        """A request's cache lookup, as its answer's ``debug["cache"]`` says (none: no cache read)."""
        trace = debug.get("cache")
        if isinstance(trace, Mapping) and "hit" in trace:
            self.cache.labels(route, "hit" if trace["hit"] else "miss").inc()

    def escalated(self, route: str, debug: Mapping[str, Any]) -> None:
        """Each question's route under --escalate-to, as its answer's ``debug["escalation"]`` says; by
        outcome, never by question id (the client's own text, which would grow the registry)."""
        trace = debug.get("escalation")
        if not isinstance(trace, Mapping):
            return
        for one in trace.get("questions", {}).values():
            if one["answered_by"] == "second":
                outcome = "escalated"
            else:
                outcome = "failed" if one["escalated"] else "kept"
            self.escalations.labels(route, outcome).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class Observed:
    """ASGI middleware: the request id (taken or made, returned), the request's metrics and log line."""

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: Iterable[str]) -> None:
        self.app, self.metrics, self.routes = app, metrics, frozenset(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, REQUEST_ID)
        rid = given if given is not None and _USABLE_ID.fullmatch(given) else uuid.uuid4().hex
        token = request_id.set(rid)
        status = 500
        started = time.perf_counter()

        async def identified(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, identified)
        finally:
            seconds = time.perf_counter() - started
            path = scope["path"]
            route = path if path in self.routes else "other"
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(seconds)
            log.info("%s %s %d in %.0f ms", scope["method"], escaped(path[:200]), status, seconds * 1000)
            request_id.reset(token)


#: Characters a log line must not carry raw: a newline could forge a line, an escape sequence a terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def escaped(text: str) -> str:
    """``text`` with its control characters written as ``\\n``, ``\\r``, ``\\t`` or ``\\xNN``."""
    return _CONTROL.sub(lambda found: repr(found.group())[1:-1], text)


def _header(scope: Scope, name: str) -> str | None:
    wanted = name.encode()
    for key, value in scope["headers"]:
        if key.lower() == wanted:
            return str(value.decode("latin-1"))
    return None


class UpstreamObserver:
    """Times and counts each request sent to one upstream, and sends the caller's request id on (what
    jevper._http's client and the SDK's HTTP client, through ``observed_http_client``, report to it).

    Its series are labelled ``upstream`` with the upstream's position among the gateway's (``"0"`` for
    the first), never its URL: /metrics asks no key, and a URL may name a private host or carry a secret."""

    def __init__(self, upstream: str, metrics: Metrics) -> None:
        self.upstream = upstream
        self.metrics = metrics

    def headers(self) -> dict[str, str]:
        rid = request_id.get()
        return {} if rid == "-" else {REQUEST_ID: rid}

    def sent(
        self, method: str, url: str, seconds: float, status: int | None, error: BaseException | None
    ) -> None:
        m, upstream = self.metrics, self.upstream
        if upstream_log.isEnabledFor(logging.DEBUG):
            upstream_log.debug(
                "%s %s: %s in %.0f ms",
                method,
                redacted_url(url),
                status or type(error).__name__,
                seconds * 1000,
            )
        if status is None:
            m.upstream_requests.labels(upstream, "none").inc()
            m.upstream_errors.labels(upstream, type(error).__name__).inc()
            return
        m.upstream_latency.labels(upstream).observe(seconds)
        m.upstream_requests.labels(upstream, str(status)).inc()
        if status >= 400:
            m.upstream_errors.labels(upstream, f"{status // 100}xx").inc()


def observed_http_client(client_class: type[Any], observer: UpstreamObserver) -> Any:
    """An instance of the SDK's own default HTTP client class whose ``send`` tells ``observer``.

    The client builds its transports itself, as any httpx client does: the environment's proxies
    (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY) and the SDK's connection limits hold. (A ``transport=``
    given to it would turn both off.) Subclassing the class the SDK names needs no import of the httpx
    it is built on (openai and anthropic moved from httpx to httpx2).
    """

    async def send(self: Any, request: Any, **options: Any) -> Any:
        request.headers.update(observer.headers())
        started = time.perf_counter()
        try:
            response = await client_class.send(self, request, **options)
        except Exception as exc:
            observer.sent(request.method, str(request.url), time.perf_counter() - started, None, exc)
            raise
        seconds = time.perf_counter() - started
        observer.sent(request.method, str(request.url), seconds, int(response.status_code), None)
        return response

    observed = type(f"Observed{client_class.__name__}", (client_class,), {"send": send})
    return observed()
