"""`python -m jevper.servers.xllamacpp_server`: llama.cpp's HTTP server (xllamacpp) in a process of its own.

xllamacpp runs llama-server's routes inside the Python process that creates its ``Server``; giving it
a process of its own lets the spawner start, watch, log and stop it exactly like a llama-server
binary. The flags are llama-server's names for the settings the spawner uses; the API key comes from
the environment (``JEVPER_LLAMA_API_KEY``), so it never shows in the process list.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from jevper.servers.console import missing_extra

API_KEY_ENV = "JEVPER_LLAMA_API_KEY"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jevper.servers.xllamacpp_server", description=__doc__)
    p.add_argument("-m", "--model", required=True, help="the GGUF file to serve")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--alias", action="append", default=[], help="the model id clients send (repeatable)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx-size", type=int, default=4096, help="the context of all slots together")
    p.add_argument("-np", "--parallel", type=int, default=1, help="slots: requests decoded at once")
    p.add_argument("--jinja", action="store_true", help="the model's own chat template")
    p.add_argument("--cache-reuse", type=int, default=0)
    p.add_argument(
        "--cache-ram",
        type=int,
        default=None,
        help="the prompt cache's bound in MiB (0: no cache, -1: no bound; llama.cpp's default: 8192)",
    )
    p.add_argument("--slots", action="store_true", help="serve GET /slots")
    p.add_argument("--props", action="store_true", help="serve POST /props as well as GET")
    return p


def params_of(args: argparse.Namespace, xllamacpp: Any, key: str = "") -> Any:
    """The server's ``CommonParams`` for parsed ``args`` and the API key (none when empty)."""
    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    params.model_alias = set(args.alias)
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.use_jinja = args.jinja
    params.n_cache_reuse = args.cache_reuse
    if args.cache_ram is not None:
        params.cache_ram_mib = args.cache_ram
    params.endpoint_slots = args.slots
    params.endpoint_props = args.props
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    if key:
        params.api_keys = [key]
    return params


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import xllamacpp
    except ImportError:
        print(
            missing_extra("python -m jevper.servers.xllamacpp_server", "local", "xllamacpp"), file=sys.stderr
        )
        return 2
    # The key is taken out of the environment, so nothing this process starts inherits it.
    params = params_of(args, xllamacpp, os.environ.pop(API_KEY_ENV, ""))
    # The server's destructor waits for a main loop nothing here can end, so a signal ends the
    # process at once (the kernel's default action), even while the model is still loading.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)
    server = xllamacpp.Server(params)
    print(f"xllamacpp_server: listening on {server.listening_address}", flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
