"""The workflows: record a server (reach it, name its release, send the probes, grade the cassettes,
install the run) and replay a recording offline (grade its cassettes again). Where things go on disk
is ``recording``'s business, sending ``runner``'s, verdicts ``grading``'s; this module puts them in
order.
"""

from __future__ import annotations

import contextlib
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
from jevper.probe.grading import Answer, grade
from jevper.probe.presets import Preset, reproducible_fields
from jevper.probe.recording import (
    UNANSWERED,
    Layout,
    Recording,
    Run,
    check_merge,
    install,
    install_partial,
    recording_key,
    replace_dir,
)
from jevper.probe.runner import Progress, record_probes
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
            "metadata says b0-unknown): pass --release, e.g. --release b11549; nothing was run"
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
    """Run the probes live into cassettes, grade them, and install the run (see ``recording``).

    Stopped while sending, the run leaves nothing; once every probe was sent, what was recorded is
    kept whatever happens next: a failure to grade one probe costs only that probe's verdict, and a
    failure to install leaves the cassettes in `<key>.partial/`.
    """
    whole = is_whole(probes, catalogue)
    check_merge(layout, target.key, target.preset.model, whole=whole)
    layout.fixtures_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.key}.recording-", dir=layout.fixtures_root))
    started = time.monotonic()
    try:
        run = _unsaved(target, scratch, timeout, whole)
        sent = record_probes(
            probes,
            catalogue=catalogue,
            preset=target.preset,
            recorder=make_vcr(record=True, secrets=[api_key] if api_key else []),
            cassette_of=lambda probe: run.cassette(probe.id),
            headers=auth_headers(api_key),
            timeout=timeout,
            progress=progress,
        )
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    wall = round(time.monotonic() - started, 1)
    try:
        run = replace(run, run=replace(run.run, wall_time_s=wall))
        answers = {s.probe.id: Answer(s.elapsed_s, s.failure) for s in sent}
        recording = grade(run, probes, catalogue=catalogue, answers=answers)
        unanswered = tuple(r.id for r in recording.probes if r.outcome in UNANSWERED)
        if unanswered:
            partial = install_partial(recording, layout)
            return RunReport(partial, partial.folder or scratch, False, unanswered, wall)
        installed, merged = install(recording, layout, whole=whole)
        return RunReport(installed, installed.folder or scratch, True, (), wall, merged)
    except BaseException:
        # Every probe was sent: its answers are kept beside the recording, whatever went wrong here.
        if scratch.exists():
            with contextlib.suppress(OSError):
                replace_dir(scratch, layout.partial_dir(target.key))
        raise


def _unsaved(target: Target, scratch: Path, timeout: float, whole: bool) -> Recording:
    """The run about to be made, as a recording in its scratch folder (no verdicts yet)."""
    first = Run(
        server=target.preset.name,
        release=target.release,
        model=target.preset.model,
        model_name=target.model_name,
        recorded_on=datetime.datetime.now(datetime.UTC).date().isoformat(),
        command=target.command,
        server_command=" ".join(target.server_command) or None,
        base_url=_portless(target.preset.base_url),
        flags={"timeout_s": timeout, "all_probes": whole, **dict(target.extra)},
        reproducible=dict(reproducible_fields()),
        jevper=jevper.__version__,
    )
    return Recording(key=target.key, run=first, folder=scratch)


def _portless(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.hostname or "", parts.path, "", ""))


def replay(
    recording: Recording,
    probes: Sequence[Probe],
    *,
    catalogue: Catalogue,
) -> Recording:
    """The recording's verdicts computed again from its cassettes, offline (nothing is sent); returns
    the new index. A probe the recording does not hold (a catalogue grown since) is simply not in it;
    one that got no answer when recorded has no cassette, and its outcome stands as recorded.
    """
    return grade(recording, probes, catalogue=catalogue)
