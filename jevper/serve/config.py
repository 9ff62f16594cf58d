"""What a gateway is started with: its upstream, how it asks it, and the bounds it keeps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_PORT = 8090


@dataclass(frozen=True)
class GatewayConfig:
    upstream: str  # the upstream's base URL, ending in /v1
    model: str  # the upstream's model id; every answer says it answered as this model
    api: str = "auto"  # the upstream surface: auto, chat_completions, responses or messages
    method: str = "auto"
    #: Merged into every upstream request as given: the upstream's own switches (thinking off, budgets).
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    upstream_api_key: str | None = None
    #: Keys a client must send (Authorization: Bearer, or x-api-key); none: no key is asked for.
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    #: Upstream requests in flight at once, shared by every question of every request (its slot count).
    pool: int = 4
    #: Requests answered at once; one more is a 429 with Retry-After.
    max_in_flight: int = 32
    max_body_bytes: int = 4 * 1024 * 1024
    timeout: float = 60.0  # seconds per upstream request
    retry_after_s: int = 1  # what a 429 asks the client to wait
