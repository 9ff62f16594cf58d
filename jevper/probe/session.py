"""The workflows: record a server (reach it, name its release, run the probes, install the run) and
replay a recording offline. Where things go on disk is ``recording``'s business; sending is
``runner``'s; this module only puts them in order.
"""

from __future__ import annotations

import datetime
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

import jevper
from jevper.probe.cassettes import make_vcr
from jevper.probe.catalogue import Catalogue, Probe
from jevper.probe.presets import Preset, get_preset, reproducible_fields
from jevper.probe.recording import (
    UNANSWERED,
    Layout,
    ProbeResult,
    Provenance,
    Recording,
    Run,
    check_merge,
    install,
    install_partial,
    read_provenance,
    recording_key,
)
from jevper.probe.reference import annotate
from jevper.probe.runner import ProbeRun, Progress, cassette_path, run_probes
from jevper.servers import SpawnedServer


class SessionError(RuntimeError):
    """A run that cannot start: the server is unreachable or does not say its release. Nothing was sent."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


@dataclass(frozen=True)
class Target:
    """The server being probed and how it is described in provenance."""

    preset: Preset  # with the base URL and model actually used
    release: str
    model_name: str
    command: str  # the probe command line, key redacted
    server_command: tuple[str, ...] = ()  # how the server was started, when we started it
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return recording_key(self.preset.name, self.release)


@dataclass(frozen=True)
class RunReport:
    recording: Recording
    written_to: Path
    complete: bool
    not_run: tuple[str, ...]
    wall_time_s: float
    merged: bool = False  # the selection went into an existing recording, which kept its other probes


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}", "x-api-key": api_key} if api_key else {}


def target_of(
    preset: Preset,
    *,
    command: str,
    api_key: str | None,
    release: str | None = None,
    server: SpawnedServer | None = None,
) -> Target:
    """The server to record: reachable, and with a release it states (or that was given, or that the
    spawner knows); a SessionError says why not, before any probe is sent."""
    headers = auth_headers(api_key)
    try:
        httpx.get(f"{preset.base_url}/models", headers=headers, timeout=10.0)
    except httpx.HTTPError as exc:
        unreachable = f"server unreachable at {preset.base_url}: {exc}; nothing was run"
        raise SessionError(unreachable, unreachable=True) from exc
    named = release or (server.version if server else None) or preset.stated_release(headers)
    if named is None:
        raise SessionError(
            f"{preset.name} at {preset.base_url} does not state its release (a llama.cpp built without git "
            "metadata says b0-unknown): pass --server-version, e.g. --server-version b11549; nothing was run"
        )
    return Target(
        preset=preset,
        release=named,
        model_name=server.model_name if server else preset.model,
        command=command,
        server_command=server.command if server else (),
        # The process id says nothing about the server; provenance keeps the rest.
        extra={k: v for k, v in server.extra.items() if k != "pid"} if server else {},
    )


def is_whole(probes: Sequence[Probe], catalogue: Catalogue) -> bool:
    return {p.id for p in probes} >= {p.id for p in catalogue.probes}


def _result(run: ProbeRun, server: str) -> ProbeResult:
    return annotate(
        ProbeResult(
            id=run.probe.id,
            surface=run.probe.surface,
            topic=run.probe.topic,
            status=run.status,
            outcome=run.verdict.outcome,
            verdict=run.verdict.text,
            evidence=run.verdict.evidence,
            elapsed_s=run.elapsed_s,
        ),
        server,
        run.verdict.facts,
    )


def record(
    target: Target,
    probes: Sequence[Probe],
    *,
    catalogue: Catalogue,
    layout: Layout,
    api_key: str | None,
    timeout: float,
    progress: Progress | None = None,
) -> RunReport:
    """Run the probes live and write cassettes, provenance and the results index."""
    whole = is_whole(probes, catalogue)
    check_merge(layout, target.key, target.preset.model, whole=whole)
    layout.fixtures_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.key}.recording-", dir=layout.fixtures_root))
    started = time.monotonic()
    try:
        runs = run_probes(
            probes,
            catalogue=catalogue,
            preset=target.preset,
            recorder=make_vcr(record=True, secrets=[api_key] if api_key else []),
            folder=scratch,
            headers=auth_headers(api_key),
            timeout=timeout,
            progress=progress,
        )
        wall = round(time.monotonic() - started, 1)
        results = tuple(_result(run, target.preset.name) for run in runs)
        unanswered = tuple(r.id for r in results if r.outcome in UNANSWERED)
        recording = Recording(
            key=target.key,
            server=target.preset.name,
            release=target.release,
            model=target.preset.model,
            model_name=target.model_name,
            provenance="recorded",
            recorded_on=datetime.datetime.now(datetime.UTC).date().isoformat(),
            command=target.command,
            probes=results,
        )
        provenance = Provenance(recording.key, "recorded live", _run(target, recording, timeout, wall, whole))
        if unanswered:
            partial = install_partial(scratch, layout, recording, provenance)
            return RunReport(recording, partial, False, unanswered, wall)
        destination, merged = install(scratch, layout, recording, provenance, whole=whole)
        return RunReport(recording, destination, True, (), wall, merged)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch)


def _run(target: Target, recording: Recording, timeout: float, wall: float, whole: bool) -> Run:
    return Run.of(
        recording,
        server_command=" ".join(target.server_command) or None,
        base_url=_portless(target.preset.base_url),
        flags={"timeout_s": timeout, "all_probes": whole, **dict(target.extra)},
        reproducible=dict(reproducible_fields()),
        wall_time_s=wall,
        jevper=jevper.__version__,
    )


def _portless(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.hostname or "", parts.path, "", ""))


def replay(
    recording: Recording,
    probes: Sequence[Probe],
    *,
    catalogue: Catalogue,
    layout: Layout,
    progress: Progress | None = None,
) -> Recording:
    """The recording's verdicts recomputed from its cassettes, offline; returns the new index.

    A probe the recording does not hold (a catalogue grown since) is simply not in it.
    """
    run = read_provenance(layout.provenance_path(recording.key)).run
    # The host is never contacted: vcrpy answers every request from the cassette or refuses it.
    preset = get_preset(recording.server).with_overrides(
        base_url=run.base_url or "http://127.0.0.1/v1", model=recording.model
    )
    folder = layout.fixture_dir(recording.key)
    wanted = [p for p in probes if cassette_path(folder, p).exists()]
    runs = run_probes(
        wanted,
        catalogue=catalogue,
        preset=preset,
        recorder=make_vcr(record=False),
        folder=folder,
        progress=progress,
    )
    fresh = {run.probe.id: _result(run, recording.server) for run in runs}
    merged = []
    for old in recording.probes:
        new = fresh.get(old.id)
        # A probe that got no answer when recorded has no cassette: its outcome stands as recorded.
        merged.append(old if new is None else replace(new, elapsed_s=old.elapsed_s))
    return replace(recording, probes=tuple(merged))
