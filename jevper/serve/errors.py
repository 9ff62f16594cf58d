"""Error bodies in the hosted API's shape.

Anything but validation is ``{"detail": {"error_type": "...", "message": "..."}}`` (the official SDK
shows ``detail.message`` in its exception); validation is a 422 whose ``detail`` is a list of
``{"loc", "msg", "type"}``, one per field.
"""

from __future__ import annotations

from collections.abc import Mapping
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

    def response(self) -> JSONResponse:
        return error(self.status, self.kind, self.message)
