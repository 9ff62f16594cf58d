"""The batch core with every request body it sends kept, so a raw side can send the very same bodies."""

from __future__ import annotations

from typing import Any

import httpx

from jevper.batch import BatchClassifier, Server


class Capturing(BatchClassifier):
    """The core, keeping every request body it sends (for the raw side to send the same)."""

    sent: list[bytes]

    def _connect(self, server: Server) -> Any:
        from openai import AsyncOpenAI

        from jevper import AsyncSystemOneClient

        async def keep(request: httpx.Request) -> None:
            if request.method == "POST":
                self.sent.append(request.content)

        sdk = AsyncOpenAI(
            base_url=server.base_url,
            api_key="none",
            max_retries=0,
            http_client=httpx.AsyncClient(event_hooks={"request": [keep]}),
        )
        return AsyncSystemOneClient(
            sdk, model=server.model, max_concurrency=server.slots, **self.client_options
        )
