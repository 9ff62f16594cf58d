"""The gateway's routes: POST /v1/systemone, GET /v1/models, GET /health.

Each System One request is checked in order (the key, the requests in flight, the body's size, the
body itself) before anything reaches the upstream; the questions are then asked through one
``AsyncSystemOneClient``, whose ``max_concurrency`` is the pool every question of every request shares.
A bad request gets a 4xx that names the field; the upstream's failures are 502 (or 504 for its
timeout), and anything the gateway did not expect a JSON 500 naming the request's id, under which the
traceback is logged. Settings that cannot work are refused when the app is made. Nothing of a key is
logged.
"""

from __future__ import annotations

import hmac
import logging
import time
import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from jevper import (
    AsyncSystemOneClient,
    IncompleteAnswerError,
    InvalidQuestionError,
    JevperError,
    LabelReadoutError,
    MalformedAnswerError,
    ProviderError,
)
from jevper.serve.config import ConfigError, GatewayConfig, flagged
from jevper.serve.validation import Invalid, Problem, parse

log = logging.getLogger("jevper.serve")


def error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An error in the shape System One clients read: ``{"error": {"type", "message"}}``."""
    return JSONResponse({"error": {"type": kind, "message": message}}, status_code=status, headers=headers)


def invalid(problems: list[Problem]) -> JSONResponse:
    return JSONResponse({"detail": [p.to_json() for p in problems]}, status_code=422)


def upstream_client(config: GatewayConfig) -> AsyncSystemOneClient:
    """The async client over the upstream: the anthropic SDK for the Messages surface, else openai's."""
    key = config.upstream_api_key or "none"
    sdk: object
    if config.api == "messages":
        from anthropic import AsyncAnthropic

        sdk = AsyncAnthropic(base_url=config.upstream.removesuffix("/v1"), api_key=key)
    else:
        from openai import AsyncOpenAI

        sdk = AsyncOpenAI(base_url=config.upstream, api_key=key)
    return AsyncSystemOneClient(
        sdk,
        model=config.model,
        api=config.api,
        method=config.method,
        extra_body=config.extra_body,
        max_concurrency=config.pool,
        timeout=config.timeout,
    )


def checked_client(config: GatewayConfig) -> AsyncSystemOneClient:
    """The upstream client, or a ConfigError naming the flag whose value the client refuses."""
    try:
        return upstream_client(config)
    except InvalidQuestionError as refused:
        raise ConfigError(flagged(str(refused))) from None


class Gateway:
    def __init__(self, config: GatewayConfig, client: AsyncSystemOneClient | None = None) -> None:
        self.config = config
        self.client = client or checked_client(config)
        self.in_flight = 0
        self._keys = [key.encode() for key in config.api_keys]

    # --- the routes ---------------------------------------------------------------------------------

    async def systemone(self, request: Request) -> Response:
        refused = self._unauthorized(request) or self._busy()
        if refused is not None:
            return refused
        self.in_flight += 1
        started = time.monotonic()
        try:
            response = await self._answer(request)
        except Exception:
            response = self._unexpected()
        finally:
            self.in_flight -= 1
        log.info(
            "POST /v1/systemone %d in %.0f ms", response.status_code, (time.monotonic() - started) * 1000
        )
        return response

    async def models(self, request: Request) -> Response:
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        model = self.config.model
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
                ],
                # The list as System One SDKs read it.
                "models": [
                    {
                        "name": model,
                        "description": f"{model} answering System One questions through jevper",
                        "release_date": "unknown",
                    }
                ],
            }
        )

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "in_flight": self.in_flight})

    # --- the checks, in order ------------------------------------------------------------------------

    def _unauthorized(self, request: Request) -> Response | None:
        if not self._keys:
            return None
        given = request.headers.get("authorization", "")
        token = given[7:] if given[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
        # Compared with every key, in constant time: neither the match nor its position leaks by timing.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(key, token.encode())
        if matched:
            return None
        said = "no API key" if not token else "an API key that is not one of this gateway's"
        return error(
            401,
            "authentication_error",
            f"expected an API key of this gateway (Authorization: Bearer <key>, or x-api-key), got {said}; "
            "send the key the gateway was started with",
        )

    def _busy(self) -> Response | None:
        if self.in_flight < self.config.max_in_flight:
            return None
        wait = self.config.retry_after_s
        return error(
            429,
            "rate_limit_error",
            f"expected at most {self.config.max_in_flight} requests in flight, got one more; retry after "
            f"{wait} s, or send fewer at once",
            headers={"retry-after": str(wait)},
        )

    async def _body(self, request: Request) -> bytes | Response:
        cap = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            return self._too_large(int(declared))
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > cap:
                return self._too_large(None)
        return bytes(body)

    def _too_large(self, size: int | None) -> Response:
        cap = self.config.max_body_bytes
        got = f"{size} bytes" if size is not None else "more"
        return error(
            413,
            "request_too_large",
            f"expected a request body of at most {cap} bytes, got {got}; send fewer or shorter questions, "
            "or start the gateway with a larger --max-body-bytes",
        )

    async def _answer(self, request: Request) -> Response:
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        try:
            asked = parse(body)
        except Invalid as bad:
            return invalid(bad.problems)
        if asked.images:
            return error(
                501,
                "not_supported_error",
                f"expected text only: {self.config.model} reads no images through this gateway; send the "
                "request without images",
            )
        try:
            answered = await self.client.system_one(state=asked.state, questions=asked.questions)
        except InvalidQuestionError as bad:
            return invalid([Problem((), str(bad))])
        except ProviderError as failed:
            return self._upstream_failed(failed)
        except (IncompleteAnswerError, LabelReadoutError, MalformedAnswerError) as unreadable:
            return error(
                502,
                "upstream_error",
                "expected an answer the upstream model can give, got one that could not be read: "
                f"{unreadable}",
            )
        except JevperError as failed:
            return error(502, "upstream_error", f"the upstream could not answer: {failed}")
        reply: dict[str, Any] = answered.to_api()
        reply["model"] = self.config.model
        return JSONResponse(reply)

    def _unexpected(self) -> Response:
        """A JSON 500 naming an id that the traceback is logged under (called in an except block)."""
        request_id = uuid.uuid4().hex
        log.exception("POST /v1/systemone request %s failed unexpectedly", request_id)
        message = (
            "expected to answer or to name what was wrong, got an error the gateway did not expect on "
            f"request {request_id}; retry, and if it recurs report that id, under which the gateway "
            "logged what happened"
        )
        return JSONResponse(
            {"error": {"type": "internal_error", "message": message, "request_id": request_id}},
            status_code=500,
            headers={"x-request-id": request_id},
        )

    def _upstream_failed(self, failed: ProviderError) -> Response:
        if failed.kind == "timeout":
            return error(
                504,
                "upstream_timeout",
                f"expected the upstream to answer within {self.config.timeout:g} s, got no answer by then: "
                f"{failed}; retry, ask fewer questions at once, or start the gateway with a larger --timeout",
            )
        return error(502, "upstream_error", f"the upstream at {self.config.upstream} failed: {failed}")


async def _no_route(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    kind = "not_found_error" if status == 404 else "method_not_allowed"
    return error(
        status,
        kind,
        "expected POST /v1/systemone, GET /v1/models or GET /health, got "
        f"{request.method} {request.url.path}",
    )


def create_app(config: GatewayConfig, client: AsyncSystemOneClient | None = None) -> Starlette:
    gateway = Gateway(config, client)
    routes = [
        Route("/v1/systemone", gateway.systemone, methods=["POST"]),
        Route("/v1/models", gateway.models, methods=["GET"]),
        Route("/health", gateway.health, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={404: _no_route, 405: _no_route})
    app.state.gateway = gateway
    return app
