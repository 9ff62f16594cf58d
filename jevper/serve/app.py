"""The gateway's routes: POST /v1/systemone, POST /v1/decisions (OpenAI's Decisions API), GET /v1/models,
GET /health.

Each System One or Decisions request is checked in order (the key, the requests in flight, the body's
time and size, the requests in flight again now that it counts, the body itself; ``Gateway._served``)
before anything reaches the upstream; the questions are then asked through one
``AsyncSystemOneClient``, whose ``max_concurrency`` is the pool every question of every request shares.
A bad request gets a 4xx that names the field; the upstream's failures are 502 (or 504 for its
timeout), and anything the gateway did not expect a JSON 500 naming the request's id, under which the
traceback is logged. Each route answers errors in its own API's envelope (``errors.Envelope``): System
One's ``detail``, OpenAI's ``error`` for Decisions, whose bad requests are 400s naming the ``param``.
Settings that cannot work are refused when the app is made. Nothing of a key is logged, and an
upstream's URL and last error are told only to a caller with a key (``health``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from jevper import (
    AsyncSystemOneClient,
    CalibrationMismatchError,
    ConfigError,
    Escalation,
    IncompleteAnswerError,
    InvalidDecisionError,
    InvalidQuestionError,
    JevperError,
    LabelReadoutError,
    MalformedAnswerError,
    ProviderError,
    __version__,
)
from jevper._failure import redacted_url
from jevper._http import HTTPClient, ServerUnreachableError, joined
from jevper._upstreams import NoUpstreamError, Upstream, Upstreams, server_failure
from jevper.decisions import DecisionResponse
from jevper.models import SystemOneResponse, sdk_for
from jevper.serve.body import Body, receive
from jevper.serve.config import GatewayConfig, flagged
from jevper.serve.errors import OPENAI, SYSTEM_ONE, Envelope, Refusal, error
from jevper.serve.observe import (
    CONTENT_TYPE,
    Metrics,
    Observed,
    UpstreamObserver,
    observed_http_client,
    request_id,
)
from jevper.serve.shadow import Shadow
from jevper.serve.validation import Invalid, Problem, decision, parse

log = logging.getLogger("jevper.serve")
T = TypeVar("T")


def upstream_client(
    config: GatewayConfig,
    metrics: Metrics | None = None,
    label: str = "0",
    escalate: Escalation | None = None,
) -> AsyncSystemOneClient:
    """The async client over the upstream: jevper's own connection for an OpenAI-style one (the openai
    SDK's work per request was most of the gateway's own cost: scripts/bench gateway), the anthropic SDK
    for Messages; each request it sends timed and counted under the upstream's ``label``."""
    observer = UpstreamObserver(label, metrics or Metrics())
    sdk: object
    if sdk_for(config.api) == "anthropic":
        from anthropic import AsyncAnthropic, DefaultAsyncHttpxClient

        http = observed_http_client(DefaultAsyncHttpxClient, observer)
        key = config.upstream_api_key or "none"
        # The SDK's base URL is the server's root, its routes carry the /v1; a query string is its own.
        root, _, query = config.upstream.partition("?")
        sdk = AsyncAnthropic(
            base_url=root.rstrip("/").removesuffix("/v1"),
            api_key=key,
            http_client=http,
            default_query=dict(parse_qsl(query, keep_blank_values=True)) or None,
        )
    else:
        agent = f"jevper-serve/{__version__}"
        try:
            sdk = HTTPClient(config.upstream, config.upstream_api_key, user_agent=agent, observer=observer)
        except ConfigError as refused:
            raise ConfigError(f"--upstream-api-key: {refused}") from None
    return AsyncSystemOneClient(
        sdk,
        model=config.model,
        api=config.api,
        method=config.method,
        extra_body=config.extra_body,
        max_concurrency=config.pool,
        timeout=config.timeout,
        retry=config.retry,
        calibration=config.calibration,
        option_orders=config.option_orders,
        cache=config.cache,
        cache_mode=config.cache_mode,
        escalate=escalate,
    )


def checked_client(
    config: GatewayConfig,
    metrics: Metrics | None = None,
    label: str = "0",
    escalate: Escalation | None = None,
) -> AsyncSystemOneClient:
    """The upstream client, or a ConfigError naming the flag whose value the client refuses."""
    try:
        return upstream_client(config, metrics, label, escalate)
    except (InvalidQuestionError, CalibrationMismatchError) as refused:
        raise ConfigError(flagged(str(refused))) from None


class Gateway:
    """The routes over the upstreams. A ``client`` given stands for the first upstream (tests)."""

    def __init__(self, config: GatewayConfig, client: AsyncSystemOneClient | None = None) -> None:
        self.config = config
        self.metrics = Metrics()
        self._models: dict[int, str] = {}  # id(client) -> the model it asks
        self._shown: dict[int, str] = {}  # id(client) -> its upstream's URL as logged (no credentials)
        # The stronger upstream the unsure questions are asked again of: one client outside the pool (it
        # takes no main request's slot, and /health does not count it); "escalation" in /metrics.
        self.escalation = escalation(config, self.metrics)

        urls = [url for url, _ in config.upstreams]

        def connect(spec: Upstream) -> AsyncSystemOneClient:
            if client is not None and spec.base_url == config.upstream:
                made = client
            else:
                # The metrics name an upstream by its position: /metrics asks no key, and a URL may carry
                # a private host or a secret.
                label = str(urls.index(spec.base_url))
                made = checked_client(self._one(spec), self.metrics, label, self.escalation)
            self._models[id(made)] = spec.model
            self._shown[id(made)] = redacted_url(spec.base_url)
            return made

        specs = [Upstream(url, model, slots=config.pool) for url, model in config.upstreams]
        self.pool = Upstreams(specs, connect, cool_down=config.cool_down_s)
        self.in_flight = 0
        self._keys = [key.encode() for key in config.api_keys]
        self.shadow: Shadow | None = None
        if config.shadow is not None:
            url, model = config.shadow
            # Its own client and pool, outside the upstreams' pool: it never takes a main request's slot,
            # and /health does not count it. Its upstream requests are labelled "shadow" in /metrics.
            # No answer cache: the shadow is there to ask the candidate, not to be answered from a file.
            candidate = replace(self.config, upstream=url, model=model, more_upstreams=(), cache=None)
            shadow_client = checked_client(candidate, self.metrics, "shadow")
            self.shadow = Shadow(
                shadow_client, url, model, self.metrics, capacity=config.shadow_queue, workers=config.pool
            )

    def _one(self, spec: Upstream) -> GatewayConfig:
        """The settings of one upstream's client."""
        return replace(self.config, upstream=spec.base_url, model=spec.model, more_upstreams=())

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """While the app serves: every upstream checked once before the first request (so /health is
        true from the first), then in the background: one that is in and cannot be reached is taken
        out, one that is out and answers is put back in."""
        headers = (
            {"authorization": f"Bearer {self.config.upstream_api_key}"}
            if self.config.upstream_api_key
            else {}
        )
        async with httpx.AsyncClient(timeout=min(5.0, self.config.timeout), headers=headers) as http:
            await asyncio.gather(*(self._check_in(http, spec) for spec in self._specs()))
            task = asyncio.create_task(self._watch(http))
            if self.shadow is not None:
                await self.shadow.start()
            try:
                yield
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                if self.shadow is not None:
                    await self.shadow.aclose()
                    await self.shadow.client.aclose()
                await self.pool.aclose()
                if self.escalation is not None:
                    await closed(self.escalation.to)

    async def _watch(self, http: httpx.AsyncClient) -> None:
        loop = asyncio.get_running_loop()
        checked = loop.time()
        while True:
            await asyncio.sleep(self.config.recheck_s)
            try:
                failing = self.pool.failing()
                for spec in failing:
                    answered = await _reached(http, spec.base_url)
                    if isinstance(answered, int) and answered < 500:
                        log.info(
                            "upstream %s answers again (GET /models %d): in",
                            redacted_url(spec.base_url),
                            answered,
                        )
                        self.pool.restore(spec.base_url)
                if loop.time() - checked >= self.config.check_s:
                    checked = loop.time()
                    out = {spec.base_url for spec in failing}
                    for spec in self._specs():
                        if spec.base_url not in out:
                            await self._check_in(http, spec)
            except Exception:  # the checks go on: an upstream left out is still asked after its cool-down
                log.exception("checking the upstreams failed unexpectedly")

    async def _check_in(self, http: httpx.AsyncClient, spec: Upstream) -> None:
        """An upstream that is in and cannot be reached is taken out (its requests would fail on it)."""
        answered = await _reached(http, spec.base_url)
        if isinstance(answered, BaseException):
            log.warning(
                "upstream %s cannot be reached (GET /models: %s): out", redacted_url(spec.base_url), answered
            )
            self.pool.take_out(spec.base_url, answered)

    # --- the routes ---------------------------------------------------------------------------------

    async def systemone(self, request: Request) -> Response:
        return await self._served(request, self._answer, SYSTEM_ONE)

    async def decisions(self, request: Request) -> Response:
        return await self._served(request, self._decide, OPENAI)

    async def _served(
        self, request: Request, answer: Callable[[Body], Awaitable[Response]], envelope: Envelope
    ) -> Response:
        """The rules every answering route keeps, in order: the key; the requests in flight; the body,
        read within --body-timeout and --max-body-bytes; the requests in flight again, this one counted
        from here on (a slow upload holds no slot); then ``answer`` on the body. Anything unexpected is
        a JSON 500. Every refusal is in the route's ``envelope``."""
        refused = self._unauthorized(request, envelope) or self._busy(envelope)
        if refused is not None:
            return refused
        try:
            try:
                body = await self._body(request)
            except Refusal as refusal:
                return refusal.response(envelope)
            except Invalid as bad:
                return envelope.invalid(bad.problems)
            refused = self._busy(envelope)
            if refused is not None:
                return refused
            self.in_flight += 1
            self.metrics.in_flight.inc()
            try:
                return await answer(body)
            finally:
                self.in_flight -= 1
                self.metrics.in_flight.dec()
        except Exception:
            return self._unexpected(request, envelope)

    async def models(self, request: Request) -> Response:
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        served = list(dict.fromkeys(model for _, model in self.config.upstreams))
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": model,
                        "object": "model",
                        "owned_by": "jevper",
                        # Answered here as a decision model: System One answers, read from the upstream.
                        "architecture": {"input_modalities": ["text"], "output_modalities": ["decisions"]},
                    }
                    for model in served
                ],
                # The list as System One SDKs read it.
                "models": [
                    {
                        "name": model,
                        "description": f"{model} answering System One questions through jevper",
                        "release_date": "unknown",
                    }
                    for model in served
                ],
            }
        )

    async def health(self, request: Request) -> Response:
        """200 while an upstream is in (503 while none is), with how many are in and out.

        Which upstream is out, and why, is told only to a caller with one of the gateway's keys (none
        when the gateway asks for none), and written to the log: an upstream's URL may carry a host name
        or credentials, its last error a server's own text."""
        # In: answering as far as the gateway knows; a failed one is in again once a call or a check of
        # it succeeds.
        failing = {spec.base_url for spec in self.pool.failing()}
        statuses = self.pool.status()
        out = sum(status.base_url in failing for status in statuses)
        serving = out < len(statuses)
        body: dict[str, Any] = {
            "status": "ok" if serving else "no upstream in",
            "in_flight": self.in_flight,
            "upstreams": {"in": len(statuses) - out, "out": out},
            # Whether answers are kept (its mode), never the file's path: /health asks no key.
            "cache": self.config.cache_mode if self.config.cache is not None else "off",
        }
        if self._keys and self._unauthorized(request) is None:
            body["upstream_details"] = [
                {
                    "url": redacted_url(status.base_url),
                    "model": spec.model,
                    "in": status.base_url not in failing,
                    "in_flight": status.in_flight,
                    "succeeded": status.succeeded,
                    "failed": status.failed,
                    **(
                        {"out_for_s": round(status.out_for, 1), "last_error": status.last_error}
                        if status.out_for
                        else {}
                    ),
                }
                for status, spec in zip(statuses, self._specs(), strict=True)
            ]
        return JSONResponse(body, status_code=200 if serving else 503)

    def _specs(self) -> list[Upstream]:
        return [Upstream(url, model, slots=self.config.pool) for url, model in self.config.upstreams]

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    async def shadow_report(self, request: Request) -> Response:
        """GET /v1/shadow: the shadow's agreement per question id (ids are the clients' own text, so a
        gateway started with keys asks one), or a 404 when the gateway runs without --shadow."""
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        if self.shadow is None:
            return error(
                404,
                "not_found_error",
                "expected a gateway started with --shadow URL=MODEL, got one without a shadow; start it "
                "with --shadow to compare a candidate upstream's answers",
            )
        return JSONResponse(self.shadow.report())

    # --- the checks, in order ------------------------------------------------------------------------

    def _unauthorized(self, request: Request, envelope: Envelope = SYSTEM_ONE) -> Response | None:
        if not self._keys:
            return None
        given = request.headers.get("authorization", "")
        token = given[7:] if given[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
        # Compared with every key, in constant time: neither the match nor its position leaks by timing.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(key, token.encode())
        if matched and token:  # an absent token never matches, whatever the keys
            return None
        said = "no API key" if not token else "an API key that is not one of this gateway's"
        return envelope.error(
            401,
            "authentication_error",
            f"expected an API key of this gateway (Authorization: Bearer <key>, or x-api-key), got {said}; "
            "send the key the gateway was started with",
        )

    def _busy(self, envelope: Envelope) -> Response | None:
        if self.in_flight < self.config.max_in_flight:
            return None
        wait = self.config.retry_after_s
        return envelope.error(
            429,
            "rate_limit_error",
            f"expected at most {self.config.max_in_flight} requests in flight, got one more; retry after "
            f"{wait} s, or send fewer at once",
            headers={"retry-after": str(wait)},
        )

    async def _body(self, request: Request) -> Body:
        """The request's body, read within the time and size the gateway allows (Refusal: 408, 413)."""
        headers = request.headers
        seconds = self.config.body_timeout
        try:
            async with asyncio.timeout(seconds):
                return await receive(
                    request.stream(),
                    headers.get("content-length"),
                    headers.get("content-encoding", ""),
                    headers.get("content-type", ""),
                    self.config.max_body_bytes,
                )
        except TimeoutError:
            raise Refusal(
                408,
                "request_timeout",
                f"expected the request body within {seconds:g} s, got it still arriving then; send it "
                "at once, or start the gateway with a larger --body-timeout",
            ) from None

    async def _answer(self, body: Body) -> Response:
        try:
            asked = parse(body.json)
        except Refusal as refused:
            return refused.response()
        except Invalid as bad:
            return SYSTEM_ONE.invalid(bad.problems)
        if asked.images or body.assets:
            return error(
                501,
                "not_supported_error",
                f"expected text only: {self.config.model} reads no images through this gateway; send the "
                "request without images",
            )

        async def on(client: AsyncSystemOneClient) -> SystemOneResponse:
            # A choice wider than the labels is read in rounds by the client, as every route reads it.
            return await client.system_one(state=asked.state, questions=asked.questions)

        answered = await self._asked(on, SYSTEM_ONE)
        if isinstance(answered, Response):
            return answered
        self.metrics.answered(answered)
        self.metrics.looked_up("/v1/systemone", answered.debug)
        self.metrics.escalated("/v1/systemone", answered.debug)
        reply: dict[str, Any] = answered.to_api()
        reply["model"] = answered.model
        # The shadow is offered the request once the answer has gone out (a background task runs after
        # the response's last byte is sent); offering only queues it.
        background = (
            BackgroundTask(self.shadow.offer, "/v1/systemone", on, answered)
            if self.shadow is not None
            else None
        )
        headers = {**calibrated_header(answered), **escalation_header(answered)}
        return JSONResponse(reply, headers=headers, background=background)

    async def _decide(self, body: Body) -> Response:
        """POST /v1/decisions: the request checked by ``jevper.decisions`` (the client's own rules), asked
        through the upstream client's ``decisions.create`` as the upstream's model, its answers in
        question order (a question whose answer cannot be read is a refusal among them)."""
        try:
            asked = decision(body.json)
        except Refusal as refused:
            return refused.response(OPENAI)
        except Invalid as bad:
            return OPENAI.invalid(bad.problems)
        except InvalidDecisionError as bad:
            return JSONResponse(bad.to_api(), status_code=400)
        if body.assets:
            return OPENAI.error(
                400,
                "unsupported_value",
                "expected a JSON body, got a multipart one with files; send images as input_image parts "
                "(a data URL) in the JSON",
            )
        sent = asked.body()

        async def on(client: AsyncSystemOneClient, model: str | None = None) -> DecisionResponse:
            return await client.decisions.create(
                input=sent["input"],
                questions=sent["questions"],
                model=self._models[id(client)] if model is None else model,
                prompt_cache_options=asked.prompt_cache_options,
                safety_identifier=asked.safety_identifier,
                prompt_cache_key=asked.prompt_cache_key,
            )

        answered = await self._asked(on, OPENAI)
        if isinstance(answered, Response):
            return answered
        self.metrics.decided(answered)
        self.metrics.looked_up("/v1/decisions", answered.debug)
        self.metrics.escalated("/v1/decisions", answered.debug)
        # Offered as a System One request is, the shadow asking its own model.
        background = (
            BackgroundTask(self.shadow.offer, "/v1/decisions", partial(on, model=self.shadow.model), answered)
            if self.shadow is not None
            else None
        )
        headers = {**calibrated_header(answered), **escalation_header(answered)}
        return JSONResponse(answered.to_api(), headers=headers, background=background)

    async def _asked(
        self, call: Callable[[AsyncSystemOneClient], Awaitable[T]], envelope: Envelope
    ) -> T | Response:
        """``call`` on the upstream with the most room, or the response that says why it was not answered:
        asked again on another while the failure is the upstream's (down, timed out, a 5xx), before any
        5xx is given."""

        async def on(client: AsyncSystemOneClient) -> T:
            try:
                return await call(client)
            except JevperError as failed:
                if server_failure(failed) is not None:
                    log.warning("upstream %s failed: %s", self._shown[id(client)], failed)
                raise

        try:
            # Two more tries than upstreams: one that failed is tried again, one call at a time, as soon as
            # its cool-down ends, and may fail again (seen live: an upstream SIGKILLed mid-run).
            attempts = len(self.config.upstreams) + (2 if len(self.config.upstreams) > 1 else 0)
            return await self.pool.ask(on, attempts=attempts)
        except NoUpstreamError as none:
            log.warning("no upstream in: %s", none)
            count = len(self.config.upstreams)
            which = "the upstream" if count == 1 else f"any of the {count} upstreams"
            return envelope.error(
                503,
                "upstream_unavailable",
                f"expected an upstream to answer, got none in: {which} failed several times in a row and "
                f"is out; retry after {self.config.retry_after_s} s (the gateway's log names each upstream "
                "and its last error)",
                headers={"retry-after": str(self.config.retry_after_s)},
            )
        except InvalidDecisionError as bad:  # what the upstream's surface cannot carry (an image)
            return JSONResponse(bad.to_api(), status_code=400)
        except InvalidQuestionError as bad:
            return envelope.invalid([Problem((), str(bad))])
        except CalibrationMismatchError as refused:
            if refused.field != "prompt_digest":
                # The gateway's own configuration, not the upstream's failure: a 500 that says so.
                return envelope.error(
                    500, "configuration_error", f"the gateway's --calibration does not fit: {refused}"
                )
            # A question the calibration holds, asked with another layout: the request's to change.
            return envelope.invalid([Problem(("questions",), str(refused))])
        except ConfigError as refused:  # --escalate-below auto, a question --calibration has no threshold for
            return envelope.error(500, "configuration_error", f"the gateway's settings do not fit: {refused}")
        except ProviderError as failed:
            return self._upstream_failed(failed, envelope)
        except (IncompleteAnswerError, LabelReadoutError, MalformedAnswerError) as unreadable:
            cause = server_failure(unreadable)
            if cause is not None:  # the upstream failed while asked again (the corrective retry)
                return self._upstream_failed(cause, envelope)
            return envelope.error(
                502,
                "upstream_error",
                "expected an answer the upstream model can give, got one that could not be read: "
                f"{unreadable}",
            )
        except JevperError as failed:
            return envelope.error(502, "upstream_error", f"the upstream could not answer: {failed}")

    def _unexpected(self, request: Request, envelope: Envelope) -> Response:
        """A JSON 500 naming the request's id, under which the traceback is logged (called in an except
        block; the id is also the response's x-request-id)."""
        rid = request_id.get()
        log.exception("%s %s request %s failed unexpectedly", request.method, request.url.path, rid)
        message = (
            "expected to answer or to name what was wrong, got an error the gateway did not expect on "
            f"request {rid}; retry, and if it recurs report that id, under which the gateway logged what "
            "happened"
        )
        if envelope is OPENAI:
            return OPENAI.error(500, "internal_error", message)
        return JSONResponse(
            {"detail": {"error_type": "internal_error", "message": message, "request_id": rid}},
            status_code=500,
        )

    def _upstream_failed(self, failed: ProviderError, envelope: Envelope) -> Response:
        if failed.kind == "timeout":
            return envelope.error(
                504,
                "upstream_timeout",
                f"expected the upstream to answer within {self.config.timeout:g} s, got no answer by then: "
                f"{failed}; retry, ask fewer questions at once, or start the gateway with a larger --timeout",
            )
        asked = "the upstream" if len(self.config.upstreams) == 1 else "every upstream asked"
        return envelope.error(502, "upstream_error", f"{asked} failed; the last: {failed}")


async def _reached(http: httpx.AsyncClient, base_url: str) -> int | BaseException | None:
    """What ``GET /models`` says of an upstream: its status when it answers (below 500, or a 500 or 501
    of a server that runs), the error when it is down (refused, reset, no connection within the timeout,
    a 502, 503 or 504), None when it cannot be told (connected, but no answer within the timeout: busy)."""
    try:
        answered = await http.get(joined(base_url, "/models"))
    except (httpx.ConnectTimeout, httpx.NetworkError, httpx.ProxyError, httpx.UnsupportedProtocol) as down:
        return ServerUnreachableError(f"{type(down).__name__}: {down or 'no answer'}")
    except (httpx.HTTPError, httpx.InvalidURL):
        return None
    if answered.status_code in (502, 503, 504):
        return ServerUnreachableError(f"HTTP {answered.status_code}")
    return answered.status_code


#: Names each calibrated question's method: "team=prior_temperature, angry=platt" (none: no header).
CALIBRATED_HEADER = "x-jevper-calibrated"


def calibrated_header(answered: SystemOneResponse | DecisionResponse) -> dict[str, str]:
    """The answer says it was calibrated, in a header: neither API's body has a field for it (a Decisions
    question is calibrated under its name). Each id is percent-encoded as UTF-8 (``紧急`` is
    ``%E7%B4%A7%E6%80%A5``): a header carries Latin-1 only, and an id may hold ``=``, ``,`` or a space."""
    methods = answered.debug.get("calibration", {}).get("calibrated", {})
    if not methods:
        return {}
    return {
        CALIBRATED_HEADER: ", ".join(
            f"{quote(qid, safe='')}={quote(m, safe='')}" for qid, m in methods.items()
        )
    }


ESCALATION_HEADER = "x-jevper-escalation"


def escalation_header(answered: SystemOneResponse | DecisionResponse) -> dict[str, str]:
    """Each question's route (--escalate-to), in a header as the calibration's: which upstream answered
    (first, second), the first answer's top probability, the threshold (none: no threshold met the
    target), and the second's failure if it failed: ``topic=second; confidence=0.6; below=0.8, ...``."""
    routes = answered.debug.get("escalation", {}).get("questions", {})
    said = []
    for qid, route in routes.items():
        below = "none" if route["below"] is None else f"{route['below']:g}"
        one = f"{quote(qid, safe='')}={route['answered_by']}; confidence={route['confidence']:.4g}"
        one += f"; below={below}"
        if route["failure"] is not None:
            one += f"; failed={route['failure']['type']}"
        said.append(one)
    return {ESCALATION_HEADER: ", ".join(said)} if said else {}


def escalation(config: GatewayConfig, metrics: Metrics | None = None) -> Escalation | None:
    """--escalate-to's: its upstream's client (the gateway's settings, with its own calibration and slots)
    and the threshold; None without it."""
    if config.escalate_to is None or config.escalate_below is None:
        return None
    url, model = config.escalate_to
    target = replace(
        config,
        upstream=url,
        model=model,
        more_upstreams=(),
        calibration=config.escalate_calibration,
        pool=config.escalate_pool,
        escalate_to=None,
        escalate_below=None,
        escalate_calibration=None,
    )
    try:
        return Escalation(checked_client(target, metrics, "escalation"), config.escalate_below)
    except ConfigError as refused:
        raise ConfigError(f"--escalate-to {redacted_url(url)}={model}: {refused}") from None


async def closed(client: AsyncSystemOneClient) -> None:
    """``client`` closed, and the connection it was given (the gateway made it)."""
    await client.aclose()
    closing = getattr(client._client, "close", None)
    if callable(closing):
        done = closing()
        if asyncio.iscoroutine(done):
            await done


async def _no_route(request: Request, exc: Exception) -> Response:
    """A 404 or 405 in the envelope of the API the path belongs to (OpenAI's for /v1/decisions), with the
    405's Allow header."""
    status = getattr(exc, "status_code", 404)
    kind = "not_found_error" if status == 404 else "method_not_allowed"
    envelope = OPENAI if request.url.path.rstrip("/") == "/v1/decisions" else SYSTEM_ONE
    return envelope.error(
        status,
        kind,
        "expected POST /v1/systemone, POST /v1/decisions, GET /v1/models, GET /v1/shadow, GET /health or "
        "GET /metrics, "
        f"got {request.method} {request.url.path}",
        headers=getattr(exc, "headers", None),
    )


def create_app(config: GatewayConfig, client: AsyncSystemOneClient | None = None) -> Starlette:
    gateway = Gateway(config, client)
    routes = [
        Route("/v1/systemone", gateway.systemone, methods=["POST"]),
        Route("/v1/decisions", gateway.decisions, methods=["POST"]),
        Route("/v1/models", gateway.models, methods=["GET"]),
        Route("/health", gateway.health, methods=["GET"]),
        Route("/metrics", gateway.metrics_text, methods=["GET"]),
        Route("/v1/shadow", gateway.shadow_report, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes, exception_handlers={404: _no_route, 405: _no_route}, lifespan=gateway.lifespan
    )
    app.state.gateway = gateway
    app.add_middleware(Observed, metrics=gateway.metrics, routes=[r.path for r in routes])
    return app
