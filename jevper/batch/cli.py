"""`python -m jevper.batch INPUT OUTPUT --questions Q.json --base-url URL=MODEL`: the local engine.

Exit status: 0 when every row was answered, 1 when some rows carry errors, 2 for bad usage or input
(refused before any request), 3 when no server could be reached (what was done stays, for --resume).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from jevper import ConfigError, Escalation, InvalidQuestionError
from jevper.batch._core import (
    COOL_DOWN_S,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    RESTART_PATIENCE_S,
    BatchClassifier,
    Server,
    as_questions,
    state_values,
    unwrapped,
)
from jevper.batch._dry import preview
from jevper.batch._engine_cli import ENGINES, run_engine
from jevper.batch._files import Input, format_of
from jevper.batch._local import DEFAULT_BATCH_ROWS, Stopped, Tally, progress_line, run, summary_line
from jevper.batch._parts import Parts
from jevper.batch._review import review_below, review_below_argument, review_path, said, write_review
from jevper.models import APIS, METHODS
from jevper.servers import SpawnedServer
from jevper.servers.console import outliving_reader
from jevper.servers.flags import (
    API_KEY_HELP,
    HelpFormatter,
    Renamed,
    add_cache_arguments,
    add_escalation_arguments,
    add_option_orders_argument,
    api_key,
    check_escalation,
    json_object,
    renamed,
    url_and_model,
)
from jevper.servers.llamacpp import BUILDS, add_spawn_arguments

PROG = "python -m jevper.batch"
DEFAULT_SLOTS = 4
#: The spellings of the release before the command lines shared one vocabulary.
RENAMED = (Renamed("--server", "--base-url"), Renamed("--slots", "--concurrency"))
#: Beside --slots, --concurrency still meant the rows in flight in all, now --limit-concurrency.
RENAMED_BESIDE_SLOTS = (Renamed("--concurrency", "--limit-concurrency"), *RENAMED)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Ask every question about every row of INPUT, over one or more servers; write each "
        "row's answers or its error to OUTPUT (Parquet, CSV or JSON Lines, by suffix).",
        formatter_class=HelpFormatter,
    )
    p.add_argument("input", metavar="INPUT", type=Path, help="a .parquet, .csv or .jsonl file of rows")
    p.add_argument(
        "output", metavar="OUTPUT", type=Path, help="where the results go (.parquet, .csv, .jsonl)"
    )
    p.add_argument(
        "--questions",
        required=True,
        type=Path,
        help="a JSON file: the System One questions object (question id -> question), or a body holding it",
    )
    p.add_argument(
        "--base-url",
        action="append",
        default=[],
        type=url_and_model,
        metavar="URL[=MODEL]",
        help="a server's base URL, ending in /v1, and the model it serves (else --model), split at the "
        "first '=' as the gateway's --upstream (http://h:8000/v1=meta-llama/Llama-3.1-8B); repeat it for "
        "several servers (or --spawn; default: none)",
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        help="the model every server serves, or one per --base-url, in order, where --base-url names none "
        "(default: none)",
    )
    p.add_argument(
        "--api-key",
        metavar="KEY",
        help=API_KEY_HELP + "; never written to the output, the logs or --resume's files",
    )
    p.add_argument(
        "--concurrency",
        action="append",
        type=int,
        default=[],
        metavar="N",
        help="requests in flight to each server at once: one for all or one per --base-url, in order "
        f"(default: {DEFAULT_SLOTS}; with --spawn, the slots it starts with)",
    )
    p.add_argument(
        "--state-column", default="state", help="the column holding each row's state (default: state)"
    )
    p.add_argument("--id-column", default="id", help="the column holding each row's id (default: id)")
    p.add_argument("--keep-columns", action="store_true", help="copy every input column to the output")
    p.add_argument(
        "--limit-concurrency",
        type=int,
        metavar="N",
        help="rows in flight at once over all the servers (default: the sum of their --concurrency)",
    )
    p.add_argument(
        "--api",
        default="auto",
        choices=APIS,
        help="the servers' surface the questions are asked on (auto: the first that answers)",
    )
    p.add_argument(
        "--method",
        default="auto",
        choices=METHODS,
        help="how an answer is read (docs/methods.md; auto: the best the surface allows)",
    )
    p.add_argument(
        "--extra-body",
        type=json_object,
        metavar="JSON",
        help="a JSON object merged into every request (default: none)",
    )
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per request")
    p.add_argument(
        "--max-retries",
        type=int,
        default=DEFAULT_MAX_RETRIES,
        help="times a row is asked again on another server after a server failed it",
    )
    p.add_argument(
        "--patience",
        type=float,
        default=RESTART_PATIENCE_S,
        metavar="SECONDS",
        help="how long rows wait for servers that fail for a reason that may pass (a restart) before "
        f"the run stops with status 3 (default: {RESTART_PATIENCE_S:g})",
    )
    p.add_argument(
        "--cool-down",
        type=float,
        default=COOL_DOWN_S,
        metavar="SECONDS",
        help="how long a server that failed is out before it is asked again, doubled with each failure in "
        f"a row (default: {COOL_DOWN_S:g})",
    )
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="where the rows are asked: this process (local, the default), Ray Data (ray: the ray extra) "
        "or Spark (spark: the spark extra and Java 17+)",
    )
    p.add_argument(
        "--engine-address",
        metavar="ADDRESS",
        help="ray: the cluster to join (default RAY_ADDRESS, else a local one); spark: the master "
        "(default local[2])",
    )
    p.add_argument(
        "--workers", type=int, help="ray: actors (default 1); spark: tasks at once (default: its cores)"
    )
    p.add_argument("--batch-rows", type=int, default=DEFAULT_BATCH_ROWS, help=argparse.SUPPRESS)
    p.add_argument("--resume", action="store_true", help="finish the run that left OUTPUT.parts/")
    add_spawn_arguments(
        p, "start the embedded llama.cpp (SmolLM2) on loopback for a try-out, with --concurrency slots"
    )
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--calibration",
        type=Path,
        metavar="FILE",
        help="a calibration.json (python -m jevper.evaluate --fit) applied to every answer of a question it "
        "holds; refused when fit for another model, method, surface or question layout (default: none)",
    )
    add_option_orders_argument(p)
    add_cache_arguments(
        p,
        "an SQLite file of answers, made if missing: a row asked before (same server, model, questions, "
        "state, settings and calibration) is answered from it without a request, and each answer asked is "
        "written to it",
    )
    p.add_argument(
        "--dry-run",
        choices=("time", "count"),
        help="write nothing; say the rows, distinct rows, cache hits, requests per server and prompt tokens "
        "(the server's /tokenize where it has one, else an estimate, labelled) the run would spend; "
        "--dry-run (=time) also asks a small sample of rows for real and gives the time at its rate, "
        "--dry-run=count asks nothing (default: a real run)",
    )
    p.add_argument(
        "--review-below",
        type=review_below_argument,
        metavar="P",
        help="also write the rows whose top probability (the lowest over their questions; not the answers' "
        "confidence, which rescales it) is below P to OUTPUT's <stem>.review.<ext>, in its format; auto: "
        "below each question's guaranteed threshold in --calibration, per label where it has one "
        "(python -m jevper.evaluate --fit --target-accuracy A --risk D) (default: none)",
    )
    add_escalation_arguments(p)
    return p


def questions_of(path: Path) -> dict[str, Any]:
    """The questions file, each question checked by the client's rules; a problem names where it is."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--questions {path}: expected a readable file, got {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"--questions {path}: expected JSON, got {exc}") from None
    asked = unwrapped(value)
    where = "questions" if asked is not value else "(top level)"
    if not isinstance(asked, dict) or not asked:
        raise InvalidQuestionError(
            f"--questions {path}: {where}: expected an object of 1 or more questions by id, got "
            f"{'an empty object' if isinstance(asked, dict) else type(asked).__name__}"
        )
    for qid, question in asked.items():
        try:
            as_questions({qid: question})
        except InvalidQuestionError as exc:
            where = ".".join(map(str, exc.loc)) or f"questions.{qid}"
            raise InvalidQuestionError(f"--questions {path}: {where}: {exc.problem}") from None
    return asked


def servers_of(args: argparse.Namespace, spawned: tuple[str, str] | None) -> list[Server]:
    """Every --base-url (and the server --spawn started) with its model, concurrency and key."""
    given: list[tuple[str, str | None]] = list(args.base_url)
    urls = given + ([(spawned[0], None)] if spawned else [])
    if not urls:
        raise ConfigError("--base-url: expected at least one server's base URL (or --spawn), got none")
    models = list(args.model) or ([spawned[1]] if spawned else [])
    if spawned and len(models) == len(given):
        models.append(spawned[1])
    if len(models) not in (0, 1, len(urls)):
        raise ConfigError(
            f"--model: expected one model for every server or one per --base-url ({len(urls)}), "
            f"got {len(models)}"
        )
    slots = list(args.concurrency) or [DEFAULT_SLOTS]
    if len(slots) not in (1, len(urls)):
        raise ConfigError(
            f"--concurrency: expected one count for every server or one per --base-url ({len(urls)}), "
            f"got {len(slots)}"
        )
    key = api_key(args.api_key)
    servers = []
    for i, (url, named) in enumerate(urls):
        model = named or (models[i if len(models) > 1 else 0] if models else None)
        if model is None:
            raise ConfigError(
                f"--base-url {url}: expected a model, got none; write --base-url {url}=MODEL, or give "
                "--model for every server that names none"
            )
        servers.append(Server(url.rstrip("/"), model, slots[i if len(slots) > 1 else 0], api_key=key))
    return servers


@contextlib.contextmanager
def _spawned(args: argparse.Namespace) -> Iterator[SpawnedServer | None]:
    if not args.spawn:
        yield None
        return
    from jevper.servers.llamacpp import slot_args, spawn_llamacpp

    slots = (args.concurrency or [DEFAULT_SLOTS])[-1]
    build = BUILDS[args.release]()
    with spawn_llamacpp(build=build, api_key=api_key(args.api_key), extra_args=slot_args(slots)) as server:
        yield server


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The options, old spellings read as the new ones (each with a warning on stderr)."""
    beside_slots = any(arg.partition("=")[0] == "--slots" for arg in argv)
    argv = ["--dry-run=time" if arg == "--dry-run" else arg for arg in argv]  # a bare flag times the run
    parsing = parser()
    args = parsing.parse_args(renamed(PROG, argv, RENAMED_BESIDE_SLOTS if beside_slots else RENAMED))
    check_escalation(parsing, args)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    # A reader that has gone (``| head``, a parent killed) costs the lines, not the run: the exit status
    # still says how the rows went, and no traceback follows.
    with outliving_reader():
        try:
            return _main(args)
        except (ConfigError, InvalidQuestionError) as bad:
            print(f"{PROG}: {bad}", file=sys.stderr)
            return 2


def _main(args: argparse.Namespace) -> int:
    # Everything that can be wrong with the input is found before the first request.
    asked = questions_of(args.questions)
    format_of(args.output, "OUTPUT")
    if args.review_below is not None:
        args.review_below = review_below(args.review_below, args.calibration, [str(qid) for qid in asked])
        if review_path(args.output).exists() and not args.resume:
            raise ConfigError(
                f"--review-below: expected no file at {review_path(args.output)} yet, got one; it is never "
                "overwritten by a new run: remove it or name another OUTPUT"
            )
    if args.output.exists():
        if args.resume and not Parts(args.output).folder.exists():
            print(f"{PROG}: OUTPUT {args.output} is complete; nothing to resume", flush=True)
            _review(args, as_questions(asked))
            return 0
        if not args.resume:
            raise ConfigError(
                f"OUTPUT {args.output}: expected a path with no file yet, got an existing file; it is never "
                "overwritten: remove it or name another OUTPUT"
            )
    source = Input(args.input)
    checked = source.check(args.id_column)
    from jevper.servers import SpawnError

    try:
        with _spawned(args) as spawned:
            classifier = BatchClassifier(
                asked,
                servers_of(args, None if spawned is None else (spawned.base_url, spawned.model)),
                id_column=args.id_column,
                state_column=args.state_column,
                keep_columns=args.keep_columns,
                concurrency=args.limit_concurrency,
                api=args.api,
                method=args.method,
                extra_body=args.extra_body,
                timeout=args.timeout,
                max_retries=args.max_retries,
                patience=args.patience,
                cool_down=args.cool_down,
                calibration=args.calibration,
                option_orders=args.option_orders,
                cache=args.cache,
                cache_mode=args.cache_mode,
                escalate=_escalation(args),
            )
            classifier.output_schema(checked.schema)
            _calibrated(args, classifier, spawned)
            if args.dry_run is not None:
                return asyncio.run(_dry_run(args, classifier, source))
            if args.engine != "local":
                status = _on_engine(args, asked, classifier)
            else:
                if args.batch_rows < 1:
                    raise ConfigError(f"--batch-rows: expected a positive integer, got {args.batch_rows}")
                stated = (
                    None
                    if spawned is None
                    else {"server_kind": spawned.server, "server_release": spawned.version}
                )
                status = asyncio.run(_run(args, classifier, source, checked.rows, stated))
            if status in (0, 1):  # OUTPUT is whole
                _review(args, classifier.questions)
            return status
    except SpawnError as failed:
        print(f"{PROG}: --spawn: {failed}", file=sys.stderr)
        return 3


def _escalation(args: argparse.Namespace) -> Escalation | None:
    """--escalate-to's server (the first servers' key), its threshold and calibration."""
    if args.escalate_to is None:
        return None
    url, model = args.escalate_to
    server = Server(url, model, args.escalate_concurrency, api_key=api_key(args.api_key))
    return Escalation(server, args.escalate_below, args.escalate_calibration)


def _calibrated(args: argparse.Namespace, classifier: BatchClassifier, spawned: SpawnedServer | None) -> None:
    """The server a calibration was fit for is checked where it is known: the one --spawn started."""
    calibration = classifier.client_options.get("calibration")
    if calibration is None:
        return
    if spawned is not None:
        calibration.check_fields(server_kind=spawned.server, server_release=spawned.version)
    methods = ", ".join(f"{qid} {q.calibrator.name}" for qid, q in calibration.questions.items())
    server = (
        "the spawned server's kind and release checked"
        if spawned is not None
        else "the servers' kind and release not checked (given by URL)"
    )
    options = classifier.client_options
    asked = f"asked with --method {options['method']} --api {options['api']}, as it was fit"
    print(
        f"{PROG}: calibrating with {args.calibration} ({methods}); {asked}; {server}",
        file=sys.stderr,
        flush=True,
    )


def _review(args: argparse.Namespace, questions: Sequence[tuple[str, Any]]) -> None:
    if args.review_below is None:
        return
    path, count = write_review(args.output, [qid for qid, _ in questions], args.review_below)
    print(f"{PROG}: {count} rows {said(args.review_below)} written to {path}", flush=True)


def _on_engine(args: argparse.Namespace, asked: dict[str, Any], classifier: BatchClassifier) -> int:
    options = {
        "id_column": args.id_column,
        "state_column": args.state_column,
        "keep_columns": args.keep_columns,
        "concurrency": args.limit_concurrency,
        **classifier.client_options,
        "escalate": classifier.escalation,
        "max_retries": args.max_retries,
        "patience": args.patience,
        "cool_down": args.cool_down,
    }
    tally = run_engine(
        args.engine,
        args.input,
        args.output,
        asked,
        classifier.servers,
        resume=args.resume,
        workers=args.workers,
        address=args.engine_address,
        options=options,
        part_rows=args.batch_rows,
    )
    print(summary_line(tally, tally.total), flush=True)
    return 0 if not tally.errors else 1


async def _run(
    args: argparse.Namespace,
    classifier: BatchClassifier,
    source: Input,
    rows: int,
    server: Mapping[str, str | None] | None = None,
) -> int:
    tally = Tally(total=rows)
    shown = sys.stderr.isatty() if args.progress is None else args.progress
    bar = asyncio.ensure_future(_progress(tally, classifier)) if shown else None
    try:
        await run(
            classifier,
            source,
            args.output,
            resume=args.resume,
            batch_rows=args.batch_rows,
            tally=tally,
            checked_rows=rows,
            server=server,
        )
    except Stopped as stopped:
        _end(bar)
        print(summary_line(tally, tally.done), flush=True)
        print(f"{PROG}: stopped: {stopped}; the rows done are kept, --resume goes on", file=sys.stderr)
        return 3
    _end(bar)
    print(summary_line(tally, rows), flush=True)
    _spared(args, classifier)
    _escalated(classifier)
    return 0 if not tally.errors else 1


async def _dry_run(args: argparse.Namespace, classifier: BatchClassifier, source: Input) -> int:
    states: list[Any] = []
    for batch in source.batches(args.batch_rows):
        states.extend(state_values(batch.column(args.state_column)))
    try:
        found = await preview(classifier, states, sample=args.dry_run == "time")
    finally:
        await classifier.aclose()
    for line in found.lines("jevper.batch"):
        print(line, flush=True)
    return 0


def _spared(args: argparse.Namespace, classifier: BatchClassifier) -> None:
    """The summary's second line: the rows answered without a request of their own."""
    if args.cache is None and not classifier.duplicates:
        return
    cached = (
        f"{classifier.cache_hits} answered from the cache {args.cache} ({args.cache_mode})"
        if args.cache is not None and args.cache_mode in ("read-write", "read")
        else "no cache read"
    )
    print(
        f"jevper.batch: {classifier.duplicates} duplicate rows answered as their first; {cached}", flush=True
    )


def _escalated(classifier: BatchClassifier) -> None:
    """The summary's line of the questions asked again of the --escalate-to server."""
    escalation = classifier.escalation
    if escalation is None:
        return
    print(
        f"jevper.batch: {classifier.escalated} questions asked again of {escalation.to.model} at "
        f"{escalation.to.shown} (below {escalation.below}), {classifier.escalation_requests_sent} requests; "
        f"{classifier.escalation_failures} failed there, their first answers kept",
        flush=True,
    )


def _end(bar: asyncio.Future[None] | None) -> None:
    if bar is not None:
        bar.cancel()
        sys.stderr.write("\n")
        sys.stderr.flush()


async def _progress(tally: Tally, classifier: BatchClassifier) -> None:
    while True:
        if classifier.upstreams is not None:
            tally.servers = classifier.upstreams.status()
        width = shutil.get_terminal_size((100, 20)).columns
        sys.stderr.write("\r" + progress_line(tally, width) + "\x1b[K")
        sys.stderr.flush()
        await asyncio.sleep(0.25)
