"""A whole run: record every selected probe into a scratch folder, then move it into place.

Fixtures are replaced only by a run in which every probe got an answer; anything less is written
beside them as `<key>.partial/`, so a committed recording is never overwritten by half a run.
A selection (`--only`) that answers in full is merged into the existing recording: its probes'
cassettes and verdicts replace the old ones, every other file is kept as it was, and the run is
listed under `updates` in provenance.json and the results index, naming the probes it answered.
Replay sends the same requests against the committed cassettes with the network untouched.
"""

from __future__ import annotations

import datetime
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jevper
from jevper.probe.catalogue import Catalogue, Probe
from jevper.probe.presets import Preset, get_preset, reproducible_fields
from jevper.probe.recording import CASSETTE_SUFFIX, make_vcr
from jevper.probe.reference import annotate
from jevper.probe.results import (
    UNANSWERED,
    Layout,
    ProbeResult,
    Recording,
    Update,
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


class MergeError(ValueError):
    """A selection cannot be merged into the existing recording; the message says why and what to do."""


@dataclass(frozen=True)
class RunReport:
    recording: Recording
    written_to: Path
    complete: bool
    not_run: tuple[str, ...]
    wall_time_s: float
    merged: bool = False  # the selection went into an existing recording, which kept its other probes


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
    check_merge(target, probes, catalogue=catalogue, layout=layout)
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
        whole = _is_whole(probes, catalogue)
        provenance = _provenance(target, recording, timeout, wall, whole)
        merged = False
        if unanswered:
            destination = layout.partial_dir(target.key)
            save_results(recording, scratch / "results.json")
            write_provenance(scratch / "provenance.json", provenance)
            if destination.exists():
                shutil.rmtree(destination)
            replace_dir(scratch, destination)
        else:
            destination, merged = _install(scratch, target.key, recording, provenance, layout, whole)
        return RunReport(recording, destination, not unanswered, unanswered, wall, merged)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch)


def _is_whole(probes: Sequence[Probe], catalogue: Catalogue) -> bool:
    return {p.id for p in probes} >= {p.id for p in catalogue.probes}


def check_merge(target: Target, probes: Sequence[Probe], *, catalogue: Catalogue, layout: Layout) -> None:
    """Refuse, before anything is sent, a selection whose answers would sit in one recording with
    answers from another model (the key names the server and release, not the model)."""
    results_path = layout.results_path(target.key)
    if _is_whole(probes, catalogue) or not results_path.exists():
        return
    existing = load_results(results_path)
    if existing.model != target.preset.model:
        raise MergeError(
            f"{target.key} was recorded with model {existing.model!r}, this run asks "
            f"{target.preset.model!r}: --only would mix the two in one recording; "
            f"pass --model {existing.model}, run every probe, or write elsewhere with --out"
        )


def _install(
    scratch: Path,
    key: str,
    recording: Recording,
    provenance: dict[str, Any],
    layout: Layout,
    whole: bool,
) -> tuple[Path, bool]:
    destination = layout.fixture_dir(key)
    results_path = layout.results_path(key)
    merge = not whole and (results_path.exists() or destination.exists())
    if merge:
        recording, provenance = _merge(scratch, destination, layout, recording, provenance)
    write_provenance(scratch / "provenance.json", provenance)
    if layout.results_root is None:
        save_results(recording, scratch / "results.json")
    # One rename puts the folder in place; until then the old one stands untouched.
    replace_dir(scratch, destination)
    if layout.results_root is not None:
        save_results(recording, results_path)
    return destination, merge


def _merge(
    scratch: Path,
    destination: Path,
    layout: Layout,
    recording: Recording,
    provenance: dict[str, Any],
) -> tuple[Recording, dict[str, Any]]:
    """The existing recording with this selection's answers in place of its old ones, built in
    `scratch` (which holds the new cassettes): the index and provenance it should now carry."""
    results_path = layout.results_path(recording.key)
    old = load_results(results_path) if results_path.exists() else _unindexed(recording, destination)
    fresh = {r.id: r for r in recording.probes}
    owned = {f"{probe_id}{CASSETTE_SUFFIX}" for probe_id in fresh} | {"provenance.json"}
    if layout.results_root is None:
        owned.add("results.json")
    if destination.exists():
        for item in destination.iterdir():
            if item.name not in owned:
                copy = shutil.copytree if item.is_dir() else shutil.copy2
                copy(item, scratch / item.name)
    probes = tuple(fresh.get(r.id, r) for r in old.probes)
    probes += tuple(r for r in recording.probes if old.result(r.id) is None)
    update = Update(recording.recorded_on, recording.command, tuple(sorted(fresh)))
    merged = replace(old, probes=probes, updates=(*_minus(old.updates, fresh), update))

    previous = _provenance_of(old, destination / "provenance.json")
    earlier = previous.pop("updates", [])
    if "updated_probes" in previous:
        # Written by an earlier jevper, which kept only the last selection's date and probe ids.
        legacy = {"recorded_on": previous.pop("updated_on", None), "probes": previous.pop("updated_probes")}
        earlier.append(legacy)
    # The header keeps describing the first run; each later run says what it was and which probes it owns.
    run = {k: v for k, v in provenance.items() if k not in ("key", "how")}
    kept = [{**u, "probes": [p for p in u["probes"] if p not in fresh]} for u in earlier]
    updates = [u for u in kept if u["probes"]] + [{**run, "probes": list(update.probes)}]
    return merged, {**previous, "updates": updates}


def _unindexed(recording: Recording, destination: Path) -> Recording:
    """A fixture folder without its results index: no verdicts to keep (its cassettes are kept all
    the same), and the run that made it as its provenance file tells, when there is one."""
    path = destination / "provenance.json"
    told = read_provenance(path) if path.exists() else {}
    header = {f: told[f] for f in ("model_name", "recorded_on", "command") if isinstance(told.get(f), str)}
    return replace(recording, probes=(), **header)


def _provenance_of(recording: Recording, path: Path) -> dict[str, Any]:
    """The recording's provenance file, or what its index says of the run when there is none."""
    if path.exists():
        return read_provenance(path)
    fields = ("key", "server", "release", "model", "model_name", "recorded_on", "command")
    return {"how": "recorded live; no provenance file was kept", **{f: getattr(recording, f) for f in fields}}


def _minus(updates: tuple[Update, ...], rerun: Mapping[str, object]) -> tuple[Update, ...]:
    """The earlier updates without the probes run again; one left with none is dropped."""
    kept = (replace(u, probes=tuple(p for p in u.probes if p not in rerun)) for u in updates)
    return tuple(u for u in kept if u.probes)


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
