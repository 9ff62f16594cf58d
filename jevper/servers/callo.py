"""callo: a System One server in front of llama-server, reading answers from the model's next-token
logprobs. Started here as a black box: installed into an environment of its own, in front of the
embedded llama.cpp serving SmolLM2 with two slots (callo reserves one for System One questions and
needs at least one more; it reads /slots and /props, so both are served).

Measured here: callo binds its port at once and answers 503 "Loading model" until its start-up
self-tests finish, 8-11 s after its upstream is up on two cores; GET /health turns 200 then.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator, Sequence

from jevper.servers.llamacpp import spawn_llamacpp
from jevper.servers.model import EMBEDDED_MODEL_NAME, MODEL_ALIAS
from jevper.servers.process import PORT, Launch, SpawnedServer, launched
from jevper.servers.toolenv import tool_env

CALLO_REQUIREMENT = "callo==0.3.1"
#: Two slots of 4096 tokens each; /slots and /props served, which callo reads.
UPSTREAM_ARGS: tuple[str, ...] = ("--ctx-size", "8192", "-np", "2", "--jinja", "--slots", "--props")
SERVE_ARGS: tuple[str, ...] = ("--s1-slots", "1")


@contextlib.contextmanager
def spawn_callo(
    *, api_key: str | None = None, startup_timeout: float = 180.0, upstream_args: Sequence[str] = ()
) -> Iterator[SpawnedServer]:
    """The embedded llama.cpp with two slots, and callo in front of it; both stopped on exit.

    callo takes no API key of its own; a key given here protects the upstream, which callo is told.
    ``upstream_args`` go to llama.cpp after UPSTREAM_ARGS (the last of a repeated flag wins).
    """
    env = tool_env("callo", CALLO_REQUIREMENT)
    with spawn_llamacpp(api_key=api_key, extra_args=(*UPSTREAM_ARGS, *upstream_args)) as upstream:
        root = upstream.base_url.removesuffix("/v1")
        command = [str(env.program("callo")), "serve", "--upstream", root, "--host", "127.0.0.1"]
        command += ["--port", PORT, *SERVE_ARGS]
        environment = dict(os.environ)
        if api_key:
            environment["LLAMA_API_KEY"] = api_key  # callo's own calls to its upstream
        launch = Launch(name="callo", command=command, env=environment, log_prefix="callo")
        version = env.version("callo")
        with launched(launch, identify=lambda _: version, timeout=startup_timeout) as running:
            yield running.serving(
                "callo",
                model=MODEL_ALIAS,
                version=version,
                model_name=f"{EMBEDDED_MODEL_NAME} on llama.cpp {upstream.version}, two slots",
                command=["callo", "serve", "--upstream", "<llama.cpp>", *SERVE_ARGS],
                extra={
                    "upstream": " ".join(upstream.command),
                    "upstream_release": upstream.version,
                    "package": CALLO_REQUIREMENT,
                },
            )


class CalloSpawner:
    """`--spawn --server callo`: callo in front of the embedded llama.cpp."""

    kind = "callo"
    releases: tuple[str, ...] = ()

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        """callo has no options of its own here: its upstream is always the default llama.cpp."""

    def start(
        self, options: argparse.Namespace, api_key: str | None
    ) -> contextlib.AbstractContextManager[SpawnedServer]:
        return spawn_callo(api_key=api_key)


SPAWNER = CalloSpawner()
