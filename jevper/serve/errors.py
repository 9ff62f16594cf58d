"""Error bodies in each route's shape: an ``Envelope`` per API.

System One's (``SYSTEM_ONE``): anything but validation is ``{"detail": {"error_type": "...", "message":
"..."}}`` (the official SDK shows ``detail.message`` in its exception); validation is a 422 whose
``detail`` is a list of ``{"loc", "msg", "type"}``, one per field. OpenAI's (``OPENAI``, POST
/v1/decisions): every error is ``{"error": {"message", "type", "param", "code"}}``, a bad request a 400.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse

if TYPE_CHECKING:
    from jevper.serve.validation import Problem


def error(status: int, kind: str, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"detail": {"error_type": kind, "message": message}}, status_code=status, headers=headers
    )


def invalid(problems: list[Problem]) -> JSONResponse:
    return JSONResponse({"detail": [p.to_json() for p in problems]}, status_code=422)


class Refusal(Exception):
    """A request refused before it is answered: raised deep in the reading, answered as it says."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message

    def response(self, envelope: Envelope | None = None) -> JSONResponse:
        return (envelope or SYSTEM_ONE).error(self.status, self.kind, self.message)


def openai_error(
    status: int,
    kind: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    *,
    param: str | None = None,
) -> JSONResponse:
    """OpenAI's envelope: ``type`` as OpenAI's classes of error, ``code`` the gateway's word for this one."""
    error_type = "server_error" if status >= 500 else "invalid_request_error"
    body = {"error": {"message": message, "type": error_type, "param": param, "code": kind}}
    return JSONResponse(body, status_code=status, headers=headers)


def openai_invalid(problems: list[Problem]) -> JSONResponse:
    """A body that could not be read (not JSON, cut short, undecodable): a 400 naming the first problem."""
    first = problems[0]
    named = ".".join(map(str, first.loc)) or None
    return openai_error(400, "invalid_request_body", first.msg, param=named)


@dataclass(frozen=True)
class Envelope:
    """How one API shapes its errors: ``error`` for a refusal with a status, ``invalid`` for a body
    that breaks the rules."""

    error: Callable[..., JSONResponse]
    invalid: Callable[[list[Problem]], JSONResponse]


SYSTEM_ONE = Envelope(error, invalid)
OPENAI = Envelope(openai_error, openai_invalid)
