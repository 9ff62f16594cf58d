"""What a gateway is started with: its upstream, how it asks it, and the bounds it keeps.

A configuration that cannot work is refused when it is made (at start-up), naming the command-line
flags, never on each request as if the client had sent something wrong.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jevper._errors import ConfigError as ConfigError  # re-exported for the gateway's modules
from jevper._failure import RetryPolicy, redacted_url
from jevper._http import has_credentials
from jevper._wire import PROMPT_RECORDS, prompt_record
from jevper.calibration import Calibration

DEFAULT_PORT = 8090

#: The command-line flag of each setting (and of the client option it becomes), for messages.
FLAGS = {
    "upstream": "--upstream",
    "model": "--model",
    "api": "--api",
    "method": "--method",
    "extra_body": "--extra-body",
    "pool": "--concurrency",
    "max_concurrency": "--concurrency",
    "max_in_flight": "--limit-concurrency",
    "max_body_bytes": "--max-body-bytes",
    "timeout": "--timeout",
    "body_timeout": "--body-timeout",
    "calibration": "--calibration",
    "option_orders": "--option-orders",
    "shadow": "--shadow",
    "shadow_queue": "--shadow-queue",
    "cache": "--cache",
    "escalate_to": "--escalate-to",
    "escalate_below": "--escalate-below",
    "escalate_calibration": "--escalate-calibration",
    "escalate_pool": "--escalate-concurrency",
    "cache_mode": "--cache-mode",
}
#: The methods that read a label's probability from logprobs, which some surfaces (Messages) do not carry.
LOGPROB_METHODS = ("logprobs", "grammar")


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
    #: Seconds a request's body may take to arrive; a slower one is a 408 (it holds no slot meanwhile).
    body_timeout: float = 30.0
    retry_after_s: int = 1  # what a 429 asks the client to wait
    #: How each upstream's client asks a request again after a transient failure (its retries and their
    #: delays, jevper.RetryPolicy) before the pool moves the request to another upstream. None: no retry
    #: of the client's own for an OpenAI-style upstream, the anthropic SDK's own for a Messages one.
    retry: RetryPolicy | None = None
    #: Seconds an upstream that failed is out before a request is sent to it again, doubled with each
    #: failure in a row (up to 30 s); the background check (``recheck_s``) may put it back in sooner.
    cool_down_s: float = 1.0
    #: More upstreams beyond the first, (base URL, model) each, every one with a pool of its own; a request
    #: goes to the one with the most room, and one that fails is taken out while the others answer.
    more_upstreams: tuple[tuple[str, str], ...] = ()
    #: Seconds between the checks of an upstream that is out (GET /models), which put it back in.
    recheck_s: float = 1.0
    #: Seconds between the checks of an upstream that is in, which take it out when it cannot be reached:
    #: /health tells of an upstream gone before a request fails on it (each is also checked at start-up).
    check_s: float = 5.0
    #: Applied by every upstream's client to each answer of a question it holds (jevper.calibration).
    calibration: Calibration | None = None
    #: Each choice asked in this many orders of its options, its answer their mean (jevper._orders).
    option_orders: int = 1
    #: A candidate upstream (base URL, model) every answered System One request is asked of afterwards,
    #: its answers compared with those given (jevper.serve.shadow); None: no shadow.
    shadow: tuple[str, str] | None = None
    #: Requests waiting for the shadow at most; one more is dropped and counted.
    shadow_queue: int = 100
    #: An SQLite file of answers (jevper._cache) every upstream's client reads and writes; replicas on one
    #: machine may share it. None: no cache.
    cache: str | None = None
    #: read-write, read, write or off, as the clients' cache_mode.
    cache_mode: str = "read-write"
    #: A stronger upstream (base URL, model) the questions whose calibrated top probability is below
    #: ``escalate_below`` (a number in (0, 1], or "auto": --calibration's thresholds) are asked again of
    #: (jevper._escalate); its own calibration, and its requests in flight at once. None: no escalation.
    escalate_to: tuple[str, str] | None = None
    escalate_below: float | Literal["auto"] | None = None
    escalate_calibration: Calibration | None = None
    escalate_pool: int = 4

    @property
    def upstreams(self) -> tuple[tuple[str, str], ...]:
        """Every upstream, (base URL, model), the first one first."""
        return ((self.upstream, self.model), *self.more_upstreams)

    def __post_init__(self) -> None:
        if (self.escalate_to is None) != (self.escalate_below is None):
            raise ConfigError(
                "--escalate-to and --escalate-below: expected both (the stronger upstream and the threshold "
                "below which a question is asked again of it) or neither, got one"
            )
        for name in ("pool", "max_in_flight", "max_body_bytes", "shadow_queue", "escalate_pool"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{FLAGS[name]}: expected a whole number of at least 1, got {value!r}")
        for name in ("timeout", "body_timeout"):
            seconds = getattr(self, name)
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, int | float)
                or not math.isfinite(seconds)
                or seconds <= 0
            ):
                raise ConfigError(f"{FLAGS[name]}: expected a positive number of seconds, got {seconds!r}")
        for key in self.api_keys:
            _check_key(key)
        urls = [url for url, _ in self.upstreams]
        repeated = sorted({url for url in urls if urls.count(url) > 1})
        if repeated:
            raise ConfigError(
                f"--upstream: expected each upstream once, got {', '.join(map(redacted_url, repeated))} more "
                "than once; "
                "give a server's URL once and its slot count with --concurrency"
            )
        signed = [url for url in urls if has_credentials(url)]
        if signed and self.upstream_api_key:
            raise ConfigError(
                f"--upstream {redacted_url(signed[0])} --upstream-api-key: expected the credentials in the "
                "upstream's URL (user:password@, sent as basic auth) or an upstream key (--upstream-api-key "
                "or $JEVPER_UPSTREAM_API_KEY, sent as a bearer token), got both; give one of them"
            )
        surface = prompt_record(self.api) if self.api in PROMPT_RECORDS else None
        if surface is not None and not surface.logprobs and self.method in LOGPROB_METHODS:
            carriers = [r.name for r in PROMPT_RECORDS.values() if r.logprobs]
            either = " or ".join([", ".join(carriers[:-1]), carriers[-1]] if len(carriers) > 1 else carriers)
            raise ConfigError(
                f"--api {self.api} --method {self.method}: expected a method the {surface.title} API can "
                "answer with, got one that reads logprobs, which it does not carry; start the gateway with "
                f"--method structured (or discrete, or auto), or with --api {either}"
            )


def _check_key(key: object) -> None:
    """A key a client must send: never blank (that would be a key every request without one matches) and
    never one no request could send (HTTP strips a header's outer whitespace). It is never quoted."""
    if not isinstance(key, str) or not key.strip():
        raise ConfigError(
            "--api-key: expected a key, got an empty one (an unset shell variable?); give the key, or leave "
            "--api-key out to ask for none"
        )
    if not (key.isascii() and key.isprintable()) or key != key.strip():
        raise ConfigError(
            "--api-key: expected a key of printable ASCII characters without spaces around it (it travels "
            "in the Authorization or x-api-key header), got one with a line break, a control or non-ASCII "
            "character or outer whitespace; strip the key where it is read"
        )


def flagged(message: str) -> str:
    """A client option's error as the gateway's: ``timeout: expected …`` becomes ``--timeout: …``."""
    name, sep, rest = message.partition(":")
    option = name.split("=")[0].strip()
    return f"{FLAGS[option]} ({name}){sep}{rest}" if option in FLAGS and sep else message
