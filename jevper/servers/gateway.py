"""jevper's own gateway (`python -m jevper.serve --spawn`): System One answered over the embedded
llama.cpp, recorded like any other System One server."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence

import jevper
from jevper._wire import PROMPT_SURFACES
from jevper.servers.model import EMBEDDED_MODEL_NAME, MODEL_ALIAS
from jevper.servers.process import PORT, Launch, SpawnedServer, launched

#: Two slots behind it, so two questions are answered at once.
POOL = 2
KEYS_ENV = "JEVPER_SERVE_API_KEYS"  # as jevper.serve reads it: never on the command line


@contextlib.contextmanager
def spawn_gateway(
    *,
    api_key: str | None = None,
    api: str = "auto",
    upstream: tuple[str, str] | None = None,
    pool: int = POOL,
    options: Sequence[str] = (),
    startup_timeout: float = 120.0,
) -> Iterator[SpawnedServer]:
    """The gateway on a free loopback port: in front of the embedded llama.cpp it starts itself, or of
    `upstream` (base URL, model); `options` are more of its command-line options."""
    behind = ["--upstream", upstream[0], "--model", upstream[1]] if upstream else ["--spawn"]
    shown = ["--upstream", "<url>", "--model", upstream[1]] if upstream else ["--spawn"]
    rest = ["--concurrency", str(pool), "--api", api, *options]
    flags = [*behind, *rest]
    command = [sys.executable, "-m", "jevper.serve", *flags, "--port", PORT, "--log-level", "warning"]
    env = {k: v for k, v in os.environ.items() if k != KEYS_ENV}
    if api_key:
        env[KEYS_ENV] = api_key
    launch = Launch(name="jevper serve", command=command, env=env, log_prefix="jevper-serve")
    with launched(launch, identify=lambda _: jevper.__version__, timeout=startup_timeout) as running:
        yield running.serving(
            "jevper",
            model=MODEL_ALIAS,
            version=jevper.__version__,
            model_name=f"{EMBEDDED_MODEL_NAME} on the embedded llama.cpp, {pool} slots",
            command=["python", "-m", "jevper.serve", *shown, *rest],
            extra={"pool": str(pool), "upstream_api": api, "pid": str(running.process.pid)},
        )


class GatewaySpawner:
    """`--spawn --server jevper`: jevper's gateway in front of the embedded llama.cpp."""

    kind = "jevper"
    releases: tuple[str, ...] = ()

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        group.add_argument(
            "--gateway-api",
            default="auto",
            choices=("auto", *PROMPT_SURFACES),
            help="the surface the gateway asks the embedded llama.cpp on (default auto)",
        )

    def start(
        self, options: argparse.Namespace, api_key: str | None
    ) -> contextlib.AbstractContextManager[SpawnedServer]:
        return spawn_gateway(api_key=api_key, api=options.gateway_api)


SPAWNER = GatewaySpawner()
