"""A whole run: record every selected probe into a scratch folder, then move it into place.

Fixtures are replaced only by a run in which every probe got an answer; anything less is written
beside them as `<key>.partial/`, so a committed recording is never overwritten by half a run.
Replay sends the same requests against the committed cassettes with the network untouched.
"""

from __future__ import annotations

import datetime
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jevper
from jevper.probe.catalogue import Catalogue, Probe
from jevper.probe.presets import Preset, get_preset, reproducible_fields
from jevper.probe.recording import make_vcr
from jevper.probe.reference import annotate
from jevper.probe.results import (
    UNANSWERED,
    Layout,
    ProbeResult,
    Recording,
    load_results,
    read_provenance,
    recording_key,
    replace_dir,
    save_results,
    write_provenance,
)
from jevper.probe.runner import ProbeRun, Progress, cassette_path, run_probes


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
    layout.fixtures_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.key}.recording-", dir=layout.fixtures_root))
    secrets = [api_key] if api_key else []
    headers = {"authorization": f"Bearer {api_key}", "x-api-key": api_key} if api_key else {}
    started = time.monotonic()
    try:
        runs = run_probes(
            probes,
            catalogue=catalogue,
            preset=target.preset,
            recorder=make_vcr(record=True, secrets=secrets),
            folder=scratch,
            headers=headers,
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
        provenance = _provenance(target, recording, timeout, wall, len(probes) == len(catalogue))
        if unanswered:
            destination = layout.partial_dir(target.key)
            save_results(recording, scratch / "results.json")
            write_provenance(scratch / "provenance.json", provenance)
            if destination.exists():
                shutil.rmtree(destination)
            replace_dir(scratch, destination)
        else:
            destination = _install(scratch, target.key, recording, provenance, layout, catalogue)
        return RunReport(recording, destination, not unanswered, unanswered, wall)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch)


def _install(
    scratch: Path,
    key: str,
    recording: Recording,
    provenance: dict[str, Any],
    layout: Layout,
    catalogue: Catalogue,
) -> Path:
    destination = layout.fixture_dir(key)
    results_path = layout.results_path(key)
    if len(recording.probes) < len(catalogue) and results_path.exists():
        # A selection (--only) updates its own probes inside an existing recording.
        old = load_results(results_path)
        fresh = {r.id: r for r in recording.probes}
        merged = tuple(fresh.get(r.id, r) for r in old.probes)
        recording = Recording(**{**recording.__dict__, "probes": merged})
        destination.mkdir(parents=True, exist_ok=True)
        for probe_id in fresh:
            source = cassette_path(scratch, catalogue.get(probe_id))
            if source.exists():
                source.replace(cassette_path(destination, catalogue.get(probe_id)))
        previous = (
            read_provenance(destination / "provenance.json")
            if (destination / "provenance.json").exists()
            else {}
        )
        provenance = {**previous, "updated_on": recording.recorded_on, "updated_probes": sorted(fresh)}
        write_provenance(destination / "provenance.json", provenance)
    else:
        write_provenance(scratch / "provenance.json", provenance)
        replace_dir(scratch, destination)
    save_results(recording, results_path)
    return destination


def _provenance(
    target: Target, recording: Recording, timeout: float, wall: float, full: bool
) -> dict[str, Any]:
    return {
        "key": recording.key,
        "how": "recorded live",
        "server": recording.server,
        "release": recording.release,
        "model": recording.model,
        "model_name": recording.model_name,
        "recorded_on": recording.recorded_on,
        "command": recording.command,
        "server_command": " ".join(target.server_command) or None,
        "base_url": _portless(target.preset.base_url),
        "flags": {"timeout_s": timeout, "all_probes": full, **dict(target.extra)},
        "reproducible": dict(reproducible_fields()),
        "wall_time_s": wall,
        "jevper": jevper.__version__,
    }


def _portless(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

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
    """The recording's verdicts recomputed from its cassettes, offline; returns the new index."""
    provenance = read_provenance(layout.fixture_dir(recording.key) / "provenance.json")
    # The host is never contacted: vcrpy answers every request from the cassette or refuses it.
    preset = get_preset(recording.server).with_overrides(
        base_url=str(provenance.get("base_url") or "http://127.0.0.1/v1"), model=recording.model
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
        merged.append(old if new is None else ProbeResult(**{**new.__dict__, "elapsed_s": old.elapsed_s}))
    return Recording(**{**recording.__dict__, "probes": tuple(merged)})
