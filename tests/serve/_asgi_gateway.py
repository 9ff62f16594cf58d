"""The gateway app asked in process over httpx's ASGI transport, with its lifespan run: the upstream
connections it opens are closed when the block ends (the transport alone never runs the lifespan, and
aiohttp then said "Unclosed client session" when the process exited)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.applications import Starlette


@contextlib.asynccontextmanager
async def in_process(app: Starlette, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client of ``app`` (base URL http://gateway), inside the app's lifespan."""
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gateway", **options
        ) as client,
    ):
        yield client
