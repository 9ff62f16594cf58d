"""`python -m jevper.serve --upstream URL=MODEL [...]`: parse the options and serve until stopped.

The keys clients must send may be given with --api-key or, to keep them out of the process list, in
JEVPER_SERVE_API_KEYS (comma-separated); the key sent to the upstreams with --upstream-api-key or in
JEVPER_UPSTREAM_API_KEY.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from jevper._failure import redacted_url
from jevper._wire import PROMPT_SURFACES
from jevper.calibration import Calibration
from jevper.serve.config import DEFAULT_PORT, ConfigError, GatewayConfig
from jevper.servers.console import missing_extra
from jevper.servers.flags import (
    HelpFormatter,
    Renamed,
    add_cache_arguments,
    add_escalation_arguments,
    add_option_orders_argument,
    check_escalation,
    json_object,
    renamed,
    url_and_model,
)
from jevper.servers.llamacpp import BUILDS, add_spawn_arguments
from jevper.servers.model import MODEL_ALIAS

KEYS_ENV, UPSTREAM_KEY_ENV = "JEVPER_SERVE_API_KEYS", "JEVPER_UPSTREAM_API_KEY"
PROG = "python -m jevper.serve"
#: The spellings of the release before the command lines shared one vocabulary.
RENAMED = (Renamed("--pool", "--concurrency"), Renamed("--max-in-flight", "--limit-concurrency"))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Serve POST /v1/systemone (TypeSafe's System One API) and POST /v1/decisions (OpenAI's "
        "Decisions API) in front of any OpenAI-style server: the questions are answered by jevper over the "
        "upstream's own surface.",
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--upstream",
        action="append",
        default=[],
        type=url_and_model,
        metavar="URL[=MODEL]",
        help="an upstream's base URL, ending in /v1, and the model it serves (else --model), split at the "
        "first '=' (the model id may hold '/' and '=': http://h:8000/v1=meta-llama/Llama-3.1-8B; a URL with "
        "a query string takes its model from --model); repeat it for several upstreams, each with "
        "--concurrency requests of its own (or --spawn; default: none)",
    )
    p.add_argument(
        "--model",
        help="the upstreams' model id where --upstream names none (default: none; with --spawn, the "
        "embedded model)",
    )
    p.add_argument(
        "--api",
        default="auto",
        choices=("auto", *PROMPT_SURFACES),
        help="the upstreams' surface the questions are asked on (auto: the first that answers)",
    )
    p.add_argument(
        "--method",
        default="auto",
        choices=("auto", "logprobs", "grammar", "structured", "discrete"),
        help="how an answer is read (docs/methods.md; auto: the best the surface allows)",
    )
    p.add_argument(
        "--extra-body",
        type=json_object,
        default={},
        metavar="JSON",
        help="merged into every upstream request as given: the upstream's own switches, "
        'e.g. \'{"chat_template_kwargs": {"enable_thinking": false}}\'',
    )
    p.add_argument("--host", default="127.0.0.1", help="the address the gateway listens on")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="the port the gateway listens on")
    p.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY",
        help=f"a key clients must send, as llama.cpp's and vLLM's --api-key (repeatable; default: none, "
        f"or ${KEYS_ENV}, comma-separated; with none, no key is asked for)",
    )
    p.add_argument(
        "--upstream-api-key",
        metavar="KEY",
        help=f"the key sent to the upstreams (default: ${UPSTREAM_KEY_ENV}, which keeps it out of the "
        "process list)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=4,
        metavar="N",
        help="requests in flight to each upstream at once, shared by every question of every request "
        "(its slots; with --spawn, the slots it starts with)",
    )
    p.add_argument(
        "--limit-concurrency",
        type=int,
        default=32,
        metavar="N",
        help="requests the gateway answers at once; one more gets a 429",
    )
    p.add_argument(
        "--max-body-bytes", type=int, default=4 * 1024 * 1024, help="a larger request body gets a 413"
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per upstream request")
    p.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        help="seconds a request's body may take to arrive; then 408",
    )
    add_spawn_arguments(p, "start the embedded llama.cpp (SmolLM2) behind it, with --concurrency slots")
    p.add_argument(
        "--log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug"),
        help="the least severe log line written (to stderr)",
    )
    p.add_argument(
        "--calibration",
        type=Path,
        metavar="FILE",
        help="a calibration.json (python -m jevper.evaluate --fit) applied to every answer of a question it "
        "holds; refused at start when fit for another model, method or surface (default: none)",
    )
    add_option_orders_argument(p)
    add_escalation_arguments(p)
    p.add_argument(
        "--shadow",
        type=url_and_model,
        metavar="URL[=MODEL]",
        help="a candidate upstream (a new server release or model) every answered /v1/systemone and "
        "/v1/decisions request is also asked of, after the answer went out; the agreement per question is "
        "in /metrics and GET /v1/shadow (the model, if not given, from --model; default: none)",
    )
    p.add_argument(
        "--shadow-queue",
        type=int,
        default=100,
        metavar="N",
        help="requests waiting for the shadow at most; one more is dropped and counted",
    )
    add_cache_arguments(
        p,
        "an SQLite file of answers, made if missing: a request asked before (same upstream, model, "
        "questions, state, settings and calibration) is answered from it with no upstream request; replicas "
        "on one machine may share the file; hits and misses are counted in /metrics",
    )
    return p


def _shadow(args: argparse.Namespace) -> tuple[str, str] | None:
    """The --shadow upstream with its model; SystemExit when it names none and --model is not given."""
    if args.shadow is None:
        return None
    url, model = args.shadow
    if not (model or args.model):
        named = redacted_url(url)
        raise SystemExit(
            f"python -m jevper.serve: --shadow {named}: expected a model, got none; write --shadow "
            f"{named}=MODEL, or give --model"
        )
    return url, model or args.model


def _upstreams(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Every --upstream with its model; SystemExit naming the one without."""
    found = []
    for url, model in args.upstream:
        if not (model or args.model):
            named = redacted_url(url)
            raise SystemExit(
                f"python -m jevper.serve: --upstream {named}: expected a model, got none; write "
                f"--upstream {named}=MODEL, or give --model for every upstream that names none"
            )
        found.append((url, model or args.model))
    return found


@contextlib.contextmanager
def _upstream(args: argparse.Namespace, checked: GatewayConfig) -> Iterator[tuple[str, str]]:
    """The first upstream: the first --upstream, or the embedded server --spawn starts (whose kind and
    release a calibration is checked against: a server given by URL says neither)."""
    if not args.spawn:
        yield _upstreams(args)[0]
        return
    from jevper.servers.llamacpp import slot_args, spawn_llamacpp

    with spawn_llamacpp(build=BUILDS[args.release](), extra_args=slot_args(args.concurrency)) as server:
        if checked.calibration is not None:
            try:
                checked.calibration.check_fields(server_kind=server.server, server_release=server.version)
            except ConfigError as refused:
                raise SystemExit(f"python -m jevper.serve: --calibration: {refused}") from None
        yield server.base_url, args.model or server.model


def calibrating(calibration: Calibration, spawned: bool) -> str:
    methods = ", ".join(f"{qid} {q.calibrator.name}" for qid, q in calibration.questions.items())
    server = "checked" if spawned else "not checked (given by URL)"
    return f"calibrating with {calibration.source} ({methods}); the upstream's kind and release {server}"


#: What the settings are checked with before --spawn has started the upstream they will point at.
_NOT_YET_SPAWNED = "http://127.0.0.1/v1"


def planned(args: argparse.Namespace, keys: tuple[str, ...] = ()) -> GatewayConfig:
    """The configuration the options ask for, checked before anything starts (ConfigError names the
    flags); with --spawn, its upstream is set once the embedded server runs."""
    # With --spawn, the embedded server is the first upstream, and any --upstream come after it.
    given = _upstreams(args)
    targets = [(_NOT_YET_SPAWNED, args.model or MODEL_ALIAS), *given] if args.spawn else given
    config = GatewayConfig(
        upstream=targets[0][0],
        model=targets[0][1],
        more_upstreams=tuple(targets[1:]),
        api=args.api,
        method=args.method,
        extra_body=args.extra_body,
        upstream_api_key=args.upstream_api_key or os.environ.get(UPSTREAM_KEY_ENV) or None,
        api_keys=keys,
        pool=args.concurrency,
        max_in_flight=args.limit_concurrency,
        max_body_bytes=args.max_body_bytes,
        timeout=args.timeout,
        body_timeout=args.body_timeout,
        calibration=None if args.calibration is None else Calibration.load(args.calibration),
        option_orders=args.option_orders,
        shadow=_shadow(args),
        shadow_queue=args.shadow_queue,
        cache=None if args.cache is None else str(args.cache),
        cache_mode=args.cache_mode,
        escalate_to=args.escalate_to,
        escalate_below=args.escalate_below,
        escalate_calibration=None
        if args.escalate_calibration is None
        else Calibration.load(args.escalate_calibration),
        escalate_pool=args.escalate_concurrency,
    )
    from jevper.serve.app import checked_client, escalation

    # The clients' own checks of what they are given (--escalate-to's too); no request is sent.
    checked_client(config, escalate=escalation(config))
    return config


def client_keys(given: Sequence[str], environ: Mapping[str, str]) -> tuple[str, ...]:
    """The keys clients must send: each --api-key as given, then those of $JEVPER_SERVE_API_KEYS,
    comma-separated, each stripped and the blank ones dropped. The variable set but holding no key is a
    ConfigError, as a blank --api-key is (GatewayConfig's): either would start a gateway that asks no one
    for a key."""
    listed = environ.get(KEYS_ENV)
    if listed is None:
        return tuple(given)
    found = tuple(key.strip() for key in listed.split(",") if key.strip())
    if not found:
        raise ConfigError(
            f"{KEYS_ENV}: expected one or more keys, comma-separated, got none (is a variable it is set "
            f"from unset?); set the keys, or unset {KEYS_ENV} to ask for none"
        )
    return (*given, *found)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The options, old spellings read as the new ones (each with a warning on stderr)."""
    parsing = parser()
    args = parsing.parse_args(renamed(PROG, argv, RENAMED))
    check_escalation(parsing, args)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        import uvicorn

        from jevper.serve.app import create_app
        from jevper.serve.observe import configure_logging
    except ImportError as exc:
        print(missing_extra(PROG, "serve", str(exc.name)), file=sys.stderr)
        return 2
    try:
        keys = client_keys(args.api_key, os.environ)
    except ConfigError as refused:
        print(f"python -m jevper.serve: {refused}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    if not args.spawn and not args.upstream:
        print(
            "python -m jevper.serve: --upstream URL=MODEL (or with --model) is required, or --spawn",
            file=sys.stderr,
        )
        return 2
    try:
        # A setting that cannot work is refused here, once, rather than on every request.
        checked = planned(args, keys)
    except ConfigError as refused:
        print(f"python -m jevper.serve: {refused}", file=sys.stderr)
        return 2
    try:
        # The gateway's port is held from here, before an upstream is spawned: the embedded server's own
        # free port can then never be this one, and a port already taken is said at once.
        listening = _listening(args.host, args.port)
    except OSError as taken:
        print(f"python -m jevper.serve: --host {args.host} --port {args.port}: {taken}", file=sys.stderr)
        return 2
    with listening, _upstream(args, checked) as (upstream, model):
        config = replace(checked, upstream=upstream, model=model)
        behind = ", ".join(f"{m} at {redacted_url(u)}" for u, m in config.upstreams)
        print(
            f"jevper.serve: POST http://{args.host}:{args.port}/v1/systemone and /v1/decisions -> {behind} "
            f"({args.api}, concurrency {args.concurrency} each, {len(keys)} key(s))",
            file=sys.stderr,
            flush=True,
        )
        if config.escalate_to is not None:
            url, model = config.escalate_to
            print(
                f"jevper.serve: escalating below {config.escalate_below} to {model} at {redacted_url(url)}",
                file=sys.stderr,
                flush=True,
            )
        if config.shadow is not None:
            url, model = config.shadow
            print(
                f"jevper.serve: shadow {model} at {redacted_url(url)} (queue {config.shadow_queue})",
                file=sys.stderr,
                flush=True,
            )
        if config.cache is not None:
            print(
                f"jevper.serve: answer cache {config.cache} ({config.cache_mode}); its hits and misses in "
                "/metrics",
                file=sys.stderr,
                flush=True,
            )
        if config.calibration is not None:
            print(f"jevper.serve: {calibrating(config.calibration, args.spawn)}", file=sys.stderr, flush=True)
        # Uvicorn drains the requests in flight on SIGTERM or Ctrl-C, for as long as one may take.
        settings = uvicorn.Config(
            create_app(config),
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            # The gateway logs each request itself (route, status, time; never a header).
            access_log=False,
            # Uvicorn's own lines go through the root handler too, which puts the request id on each.
            log_config=None,
            timeout_graceful_shutdown=int(args.timeout) + 5,
        )
        uvicorn.Server(settings).run(sockets=[listening])
    return 0


def _listening(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (IPv4 or IPv6, as the host resolves), for Uvicorn."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    listening = socket.socket(family, kind, proto)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
        listening.listen(2048)
    except OSError:
        listening.close()
        raise
    return listening
