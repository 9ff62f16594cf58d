"""laya-serve: a System One server for Laya decision models, run as a black box with its `fake`
backend (uniform answers, no weights), installed into an environment of its own.

Measured here: GET /healthz is 200 about 0.5 s after start; it requires a model id among its own
(`jev-latest` works) and answers as `laya-english`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

from jevper.servers.process import PORT, Launch, SpawnedServer, launched
from jevper.servers.toolenv import tool_env

LAYA_REQUIREMENT = "laya-serve==0.2.1"
MODEL = "jev-latest"


@contextlib.contextmanager
def spawn_laya(*, api_key: str | None = None, startup_timeout: float = 60.0) -> Iterator[SpawnedServer]:
    env = tool_env("laya-serve", LAYA_REQUIREMENT)
    environment = {**os.environ, "LAYA_SERVE_BACKEND": "fake"}
    if api_key:
        environment["LAYA_SERVE_API_KEY"] = api_key
    command = [str(env.program("laya-serve")), "--host", "127.0.0.1", "--port", PORT]
    launch = Launch(
        name="laya-serve",
        command=command,
        env=environment,
        log_prefix="laya-serve",
        health_path="/healthz",
    )
    version = env.version("laya-serve")
    with launched(launch, identify=lambda _: version, timeout=startup_timeout) as running:
        yield running.serving(
            "laya",
            model=MODEL,
            version=version,
            model_name="laya-serve's fake backend (uniform answers, no model)",
            command=["LAYA_SERVE_BACKEND=fake", "laya-serve"],
            extra={"package": LAYA_REQUIREMENT},
        )


class LayaSpawner:
    """`--spawn --server laya`: laya-serve with its fake backend."""

    kind = "laya"
    releases: tuple[str, ...] = ()

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        """laya-serve has no options of its own here: the fake backend is the one that runs here."""

    def start(
        self, options: argparse.Namespace, api_key: str | None
    ) -> contextlib.AbstractContextManager[SpawnedServer]:
        return spawn_laya(api_key=api_key)


SPAWNER = LayaSpawner()
