"""`python -m jevper.probe COMMAND`: record a server, replay recordings, regenerate reports, diff, list.

Each command is an argparse subcommand with its own options; the work is done by ``session``,
``reports`` and ``diff``, and this module parses, prints and turns errors into exit codes. A command
line that starts with an option is a `record` run (`python -m jevper.probe --server llamacpp ...`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from jevper.probe import ci, diff
from jevper.probe.catalogue import Catalogue, CatalogueError, load_catalogue
from jevper.probe.html import PageError
from jevper.probe.presets import Preset, get_preset, load_presets
from jevper.probe.recording import UNANSWERED, Layout, MergeError, ProbeResult, Recording, check_merge
from jevper.probe.runner import Sent
from jevper.servers import SpawnedServer, SpawnError, load_spawner
from jevper.servers.console import outliving_reader
from jevper.servers.flags import API_KEY_HELP, HelpFormatter, Renamed, api_key, renamed, url_and_model

EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def _layout(args: argparse.Namespace) -> Layout:
    return Layout.out(args.out) if args.out else Layout.repository()


def catalogue_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--catalogue",
        action="append",
        type=Path,
        metavar="PATH",
        help="a TOML file or folder of probes of your own, in the catalogue's format (repeatable)",
    )


def _catalogue(args: argparse.Namespace) -> Catalogue:
    return load_catalogue(args.catalogue or ())


def _no_match(args: argparse.Namespace, catalogue: Catalogue) -> bool:
    """Say so when `--only` selects nothing."""
    if args.only and not catalogue.select(args.only):
        print(f"no probe id matches {args.only}; `list` shows them", file=sys.stderr)
        return True
    return False


# --- record ----------------------------------------------------------------------------------------


def record_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server", choices=sorted(load_presets()), required=True, help="the server's kind (its preset)"
    )
    parser.add_argument(
        "--base-url",
        type=url_and_model,
        metavar="URL[=MODEL]",
        help="the server's base URL, ending in /v1, and the model to ask (else --model), split at the first "
        "'=' as the gateway's --upstream (default: the preset's)",
    )
    parser.add_argument("--model", help="the model id to ask (default: the preset's)")
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help=API_KEY_HELP.replace("as a bearer token", "as a bearer token and x-api-key"),
    )
    parser.add_argument("--only", action="append", metavar="GLOB", help="probe ids to run (repeatable)")
    parser.add_argument(
        "--out", type=Path, help="write fixtures/<key>/ and reports/ here (default: the repository)"
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="record a release the destination already holds again, in the old recording's place (without "
        "it, a run of every probe over an existing recording is refused before anything is sent; an --only "
        "run merges into it)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the requests; no network")
    parser.add_argument("--spawn", action="store_true", help="start the server on a free loopback port")
    spawners = {p.name: load_spawner(p.spawner, p.name) for p in load_presets().values() if p.spawner}
    chosen = "; ".join(
        f"{kind}: one of {', '.join(s.releases)}, default {s.releases[0]}"
        for kind, s in sorted(spawners.items())
        if s.releases
    )
    parser.add_argument(
        "--release",
        metavar="RELEASE",
        help="the server's release: with --base-url, what the recording is named when the server does not "
        f"state it; with --spawn, the release to start where the kind offers a choice ({chosen}), else "
        "the one the started server must state (default: the server's own)",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    catalogue_argument(parser)
    ci.add_arguments(parser)
    for name, spawner in spawners.items():
        group = parser.add_argument_group(f"--spawn --server {name}")
        spawner.add_arguments(group)


def run_record(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from jevper.probe.session import SessionError

    catalogue = _catalogue(args)
    if _no_match(args, catalogue):
        return EXIT_USAGE
    url, named = args.base_url or (None, None)
    preset = get_preset(args.server).with_overrides(base_url=url, model=named or args.model)
    if args.dry_run:
        from jevper.probe.compose import requests_for

        for probe in catalogue.select(args.only):
            for request in requests_for(probe, catalogue, preset):
                print(f"# {probe.id} -> {preset.base_url}{request.path}\n{request.describe()}\n")
        return EXIT_OK
    key = api_key(args.api_key)
    layout = _layout(args)
    try:
        checks = ci.Checks.prepare(args, layout, catalogue)
    except ci.BaselineError as exc:
        print(f"{exc}; nothing was run", file=sys.stderr)
        return EXIT_USAGE
    run = _Run(args, catalogue, layout, key, command_line(argv, key), checks)
    try:
        if not args.spawn:
            return run.probe(preset, None)
        if preset.spawner is None:
            startable = sorted(p.name for p in load_presets().values() if p.spawner)
            print(f"--spawn knows {startable}, not {args.server!r}", file=sys.stderr)
            return EXIT_USAGE
        spawner = load_spawner(preset.spawner, preset.name)
        if spawner.releases and args.release not in (None, *spawner.releases):
            print(
                f"--release: expected one of {', '.join(spawner.releases)} with --spawn --server "
                f"{args.server}, got {args.release}",
                file=sys.stderr,
            )
            return EXIT_USAGE
        with spawner.start(args, key) as server:
            # A spawner names a variant of the recipe after the release (b11549-2slots, 0.32.0-batched).
            asked = args.release
            if asked is not None and server.version != asked and not server.version.startswith(f"{asked}-"):
                print(
                    f"--release: expected the started {args.server} to be {args.release}, it states "
                    f"{server.version}; nothing was run",
                    file=sys.stderr,
                )
                return EXIT_USAGE
            spawned = preset.with_overrides(
                base_url=server.base_url, model=named or args.model or server.model
            )
            return run.probe(spawned, server)
    except SpawnError as exc:
        print(f"could not start the server: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except SessionError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_UNREACHABLE if exc.unreachable else EXIT_USAGE
    except MergeError as exc:
        print(f"{exc}; nothing was run", file=sys.stderr)
        return EXIT_USAGE


@dataclass(frozen=True)
class _Run:
    """One `record` invocation, once its options are read."""

    args: argparse.Namespace
    catalogue: Catalogue
    layout: Layout
    api_key: str | None
    command: str
    checks: ci.Checks

    def probe(self, preset: Preset, server: SpawnedServer | None) -> int:
        from jevper.probe.reports import print_matrix, render_all
        from jevper.probe.session import is_whole, record, target_of

        probes = self.catalogue.select(self.args.only)
        target = target_of(
            preset,
            command=self.command,
            api_key=self.api_key,
            release=None if server else self.args.release,
            server=server,
        )
        whole = is_whole(probes, self.catalogue)
        check_replace(self.layout, target.key, whole=whole, replace=self.args.replace)
        check_merge(self.layout, target.key, preset.model, whole=whole)
        print(f"probing {target.key} at {preset.base_url} ({len(probes)} probes, model {preset.model})")
        report = record(
            target,
            probes,
            catalogue=self.catalogue,
            layout=self.layout,
            api_key=self.api_key,
            timeout=self.args.timeout,
            progress=_progress,
        )
        counts: dict[str, int] = {}
        for result in report.recording.probes:
            counts[result.outcome] = counts.get(result.outcome, 0) + 1
        summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
        print(f"{len(report.recording.probes)} probes in {report.wall_time_s} s: {summary}")
        _say_ungraded(report.recording.probes)
        if not report.complete:
            print(f"not run (no answer): {', '.join(report.not_run)}", file=sys.stderr)
            print(
                f"partial run written to {report.written_to}; committed fixtures untouched", file=sys.stderr
            )
            return self._finish(report.recording, EXIT_INCOMPLETE)
        print(f"cassettes, provenance and results written to {report.written_to}")
        if report.merged:
            replaced = len(report.recording.probes)
            print(
                f"merged into the existing recording: {replaced} probes replaced, "
                "the others kept as they were"
            )
        for path in render_all(self.layout, self.catalogue):
            print(f"generated {path}")
        print_matrix(report.recording, self.catalogue)
        # Recorded in full, but a verdict is missing until the classifier is mended and `replay` run.
        ungraded = any(r.outcome == "ungraded" for r in report.recording.probes)
        return self._finish(report.recording, EXIT_INCOMPLETE if ungraded else EXIT_OK)

    def _finish(self, recording: Recording, status: int) -> int:
        return self.checks.finish(
            recording,
            catalogue=self.catalogue,
            reports_dir=self.layout.reports_dir,
            mode="record",
            status=status,
            command=self.command,
        )


def check_replace(layout: Layout, key: str, *, whole: bool, replace: bool) -> None:
    """Refuse, before anything is sent, a whole run that would take the place of a recording without
    --replace: recording a release again must not lose the earlier recording without a word."""
    if whole and not replace and layout.holds(key):
        raise MergeError(
            f"{key} is already recorded in {layout.fixture_dir(key)}: pass --replace to record it again in "
            "its place, or --out DIR to record it elsewhere"
        )


def command_line(argv: Sequence[str], api_key: str | None) -> str:
    """The command as recorded: the key redacted, and an absolute path cut to `<dir>/` and its last part.

    Recordings are shared and committed; where a user kept theirs is nobody else's business.
    """
    shown = []
    for arg in argv:
        text = arg.replace(api_key, "<redacted>") if api_key else arg
        flag, equals, value = text.partition("=") if text.startswith("--") else ("", "", text)
        if os.path.isabs(value):
            value = f"<dir>/{os.path.basename(value.rstrip('/'))}"
        shown.append(f"{flag}{equals}{value}")
    return shlex.join(["python", "-m", "jevper.probe", *shown])


def _progress(index: int, total: int, sent: Sent) -> None:
    status = "-" if sent.status is None else str(sent.status)
    width = len(str(total))
    line = f"[{index:>{width}}/{total}] {sent.probe.id:<34} {status:>3} {sent.outcome:<9}"
    print(f"{line} {sent.elapsed_s:6.2f}s", flush=True)


def _say_ungraded(results: Sequence[ProbeResult]) -> None:
    """A probe whose cassette its classifier could not read: recorded, not graded; say which and why."""
    for result in results:
        if result.outcome == "ungraded":
            print(f"{result.id}: {result.verdict} ({result.evidence})", file=sys.stderr)


# --- replay, report, list, diff ----------------------------------------------------------------------


def replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", choices=sorted(load_presets()), help="only this server kind's recordings")
    parser.add_argument("--release", metavar="RELEASE", help="only this release's recordings")
    parser.add_argument("--only", action="append", metavar="GLOB", help="probe ids to replay (repeatable)")
    parser.add_argument("--out", type=Path, help="replay an --out folder instead of the repository")
    catalogue_argument(parser)
    ci.add_arguments(parser)


def run_replay(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from jevper.probe.reports import render_all
    from jevper.probe.session import replay

    catalogue = _catalogue(args)
    if _no_match(args, catalogue):
        return EXIT_USAGE
    layout = _layout(args)
    # Every folder holds cassettes: a recording, or a fixture transcribed from documentation.
    recordings = list(layout.recordings())
    if args.server:
        recordings = [r for r in recordings if r.server == args.server]
    if args.release:
        recordings = [r for r in recordings if r.release == args.release]
    if not recordings:
        print(f"no recorded fixtures under {layout.fixtures_root} match", file=sys.stderr)
        return EXIT_USAGE
    if ci.wanted(args) and len(recordings) > 1:
        keys = ", ".join(r.key for r in recordings)
        print(
            f"--baseline, --junit and --json take one recording, {len(recordings)} match ({keys}): "
            "choose one with --server and --release",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        checks = ci.Checks.prepare(args, layout, catalogue)
    except ci.BaselineError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    status = EXIT_OK
    finished: list[Recording] = []
    selected = {p.id for p in catalogue.select(args.only)}
    for recording in recordings:
        print(f"grading {recording.key} again from the cassettes in {recording.folder} (offline)")
        probes = catalogue.select(args.only)
        fresh = replay(recording, probes, catalogue=catalogue)
        changed = [
            new.id
            for old, new in zip(recording.probes, fresh.probes, strict=True)
            if (old.outcome, old.verdict, old.status) != (new.outcome, new.verdict, new.status)
        ]
        faults = [r.id for r in fresh.probes if r.outcome in UNANSWERED and r.id in selected]
        _say_ungraded([r for r in fresh.probes if r.id in selected])
        if any(r.outcome == "ungraded" and r.id in selected for r in fresh.probes):
            status = EXIT_INCOMPLETE
        print(
            f"{len(fresh.probes) - len(changed)} verdicts identical to the recorded index"
            + (f"; changed: {', '.join(changed)}" if changed else "")
        )
        if faults:
            print(f"no answer to replay for: {', '.join(faults)}", file=sys.stderr)
            status = EXIT_INCOMPLETE
        finished.append(fresh.save())
    for path in render_all(layout, catalogue):
        print(f"generated {path}")
    for fresh in finished:
        status = checks.finish(
            fresh,
            catalogue=catalogue,
            reports_dir=layout.reports_dir,
            mode="replay",
            status=status,
            command=command_line(argv, None),
        )
    return status


def report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, help="read and write under DIR instead of the repository")
    catalogue_argument(parser)


def run_report(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from jevper.probe.reports import render_all

    for path in render_all(_layout(args), _catalogue(args)):
        print(f"generated {path}")
    return EXIT_OK


def list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", action="append", metavar="GLOB", help="probe ids to list (repeatable)")
    catalogue_argument(parser)


def run_list(args: argparse.Namespace, argv: Sequence[str]) -> int:
    catalogue = _catalogue(args)
    if _no_match(args, catalogue):
        return EXIT_USAGE
    for probe in catalogue.select(args.only):
        print(f"{probe.id}\t{probe.surface}{'' if probe.canonical else chr(9) + 'not canonical'}")
    return EXIT_OK


def run_diff(args: argparse.Namespace, argv: Sequence[str]) -> int:
    return diff.run(args)


Handler = Callable[[argparse.Namespace, Sequence[str]], int]
#: name -> (what it does, its options, its handler).
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Handler]] = {
    "record": (
        "probe a live server and record its answers (the default command)",
        record_arguments,
        run_record,
    ),
    "replay": ("grade every recording again from its cassettes, offline", replay_arguments, run_replay),
    "report": ("regenerate every generated file from the fixtures, offline", report_arguments, run_report),
    "diff": ("every probe whose verdict differs between two recordings", diff.add_arguments, run_diff),
    "list": ("the probe ids, their surfaces, and which are canonical", list_arguments, run_list),
}


def build_parser() -> argparse.ArgumentParser:
    catalogue = load_catalogue()
    canonical = sum(p.canonical for p in catalogue.probes)
    parser = argparse.ArgumentParser(
        prog="python -m jevper.probe",
        description=f"Send the catalogue's {len(catalogue)} probes ({canonical} canonical) to a server, "
        "record the answers as cassettes, and render capability matrices. A command line that starts "
        "with an option is `record`.",
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (summary, arguments, handler) in COMMANDS.items():
        sub = commands.add_parser(
            name,
            help=summary,
            description=summary[:1].upper() + summary[1:] + ".",
            formatter_class=HelpFormatter,
        )
        arguments(sub)
        sub.set_defaults(handler=handler)
    return parser


#: The spellings of the release before the command lines shared one vocabulary.
RENAMED = (Renamed("--server-version", "--release"),)


def main(argv: Sequence[str] | None = None) -> int:
    args = renamed("python -m jevper.probe", list(sys.argv[1:] if argv is None else argv), RENAMED)
    if args and args[0].startswith("-") and args[0] not in ("-h", "--help"):
        args = ["record", *args]
    # A reader gone mid-run (`| head`) once ended a record run at its next progress line, writing nothing
    # and exiting 0: now it costs the lines only.
    with outliving_reader():
        try:
            parsed = build_parser().parse_args(args)
            given = args[1:] if args[:1] == ["record"] else args
            handler: Handler = parsed.handler
            return handler(parsed, given)
        except CatalogueError as exc:
            print(f"catalogue error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except PageError as exc:
            print(f"report error: {exc}", file=sys.stderr)
            return EXIT_USAGE
