"""A recording on disk, owned here: its folder, results index (format 1), typed provenance, and the
atomic install and merge of a run.

A recording is one run against one server release, identified by `<server>-<release>`: its cassettes
(read through ``cassettes``), `provenance.json` and the results index sit together, and reports are
built from those files alone. A run is written into a scratch folder and moved into place by one
rename, only when every probe got an answer; anything less goes beside it as `<key>.partial/`. A
selection (`--only`) that answers in full is merged into the existing recording: its cassettes and
verdicts replace the old ones, every other file is kept, and the run is listed under `updates`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from jevper.probe.cassettes import CASSETTE_SUFFIX

FORMAT = 1
Outcome = Literal["supported", "ignored", "refused", "info", "fault", "timeout", "not-run"]
OUTCOMES: tuple[Outcome, ...] = ("supported", "ignored", "refused", "info", "fault", "timeout", "not-run")
#: Outcomes meaning the probe got no answer to classify.
UNANSWERED: frozenset[str] = frozenset({"fault", "timeout", "not-run"})
PROVENANCE_FILE = "provenance.json"
RESULTS_FILE = "results.json"


class ResultsError(ValueError):
    """A results index or provenance file on disk cannot be read; the message names the file and why."""


class MergeError(ValueError):
    """A selection cannot be merged into the existing recording; the message says why and what to do."""


@dataclass(frozen=True)
class ProbeResult:
    id: str
    surface: str
    topic: str
    status: int | None
    outcome: Outcome
    verdict: str
    evidence: str
    elapsed_s: float | None
    reference: str | None = None
    agrees_with_reference: bool | None = None


@dataclass(frozen=True)
class Update:
    """A later run of a few probes (`--only`) merged into a recording: their answers come from it."""

    recorded_on: str
    command: str
    probes: tuple[str, ...]


@dataclass(frozen=True)
class Recording:
    """The results index: which recording this is, and every probe's verdict."""

    key: str
    server: str
    release: str
    model: str
    model_name: str
    provenance: Literal["recorded", "transcribed"]
    recorded_on: str
    command: str
    probes: tuple[ProbeResult, ...] = field(default_factory=tuple)
    #: Runs merged in after the one the header describes; each owns the probes it lists.
    updates: tuple[Update, ...] = ()

    def result(self, probe_id: str) -> ProbeResult | None:
        return next((p for p in self.probes if p.id == probe_id), None)

    def to_json(self) -> dict[str, Any]:
        data = {"format": FORMAT, **asdict(self)}
        data["probes"] = [asdict(p) for p in self.probes]
        # Written only when there is one, so an index made by a single run reads as it always did.
        data.pop("updates")
        if self.updates:
            data["updates"] = [{**asdict(u), "probes": list(u.probes)} for u in self.updates]
        return data

    def run_of(self, probe_id: str) -> Update | None:
        """The later run this probe's answer comes from, or None for the run the header describes."""
        return next((u for u in self.updates if probe_id in u.probes), None)


def recording_key(server: str, release: str) -> str:
    return f"{server}-{release}"


@dataclass(frozen=True)
class Run:
    """How one run was made, as provenance.json tells it (None: what an older file did not keep)."""

    server: str | None = None
    release: str | None = None
    model: str | None = None
    model_name: str | None = None
    recorded_on: str | None = None
    command: str | None = None
    server_command: str | None = None
    base_url: str | None = None
    flags: Mapping[str, Any] | None = None
    reproducible: Mapping[str, Any] | None = None
    wall_time_s: float | None = None
    jevper: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def of(cls, recording: Recording, **more: Any) -> Run:
        """What the results index says of the run that made it, and `more` that it does not say."""
        said = ("server", "release", "model", "model_name", "recorded_on", "command")
        return cls(**{name: getattr(recording, name) for name in said}, **more)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})


@dataclass(frozen=True)
class LaterRun:
    """A run merged into a recording after the first, and the probes whose answers it owns."""

    run: Run
    probes: tuple[str, ...]
    #: Written by jevper before 2026-11-29, which kept only the date and the probe ids.
    dated_only: bool = False

    def to_json(self) -> dict[str, Any]:
        if self.dated_only:
            return {"recorded_on": self.run.recorded_on, "probes": list(self.probes)}
        return {**self.run.to_json(), "probes": list(self.probes)}


@dataclass(frozen=True)
class Provenance:
    """provenance.json: how the recording was made (its first run) and each later run merged in."""

    key: str
    how: str  # "recorded live"
    run: Run
    updates: tuple[LaterRun, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"key": self.key, "how": self.how, **self.run.to_json()}
        if self.updates:
            data["updates"] = [u.to_json() for u in self.updates]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: Path) -> Provenance:
        if not isinstance(data.get("key"), str) or not isinstance(data.get("how"), str):
            raise ResultsError(f"{path}: expected a provenance file with a key and how, got {sorted(data)}")
        updates = [
            LaterRun(Run.from_json(u), tuple(u["probes"]), dated_only="command" not in u)
            for u in data.get("updates", ())
        ]
        if "updated_probes" in data:
            # The one earlier layout: the last selection's date and probe ids beside the header.
            updates.append(
                LaterRun(Run(recorded_on=data.get("updated_on")), tuple(data["updated_probes"]), True)
            )
        return cls(data["key"], data["how"], Run.from_json(data), tuple(updates))


#: A later run as the results index lists it, or as provenance.json does.
LaterOf = TypeVar("LaterOf", Update, LaterRun)


def without_rerun(updates: tuple[LaterOf, ...], rerun: Mapping[str, object]) -> tuple[LaterOf, ...]:
    """The later runs, minus the probes run again; one left with none is dropped."""
    kept = (replace(u, probes=tuple(p for p in u.probes if p not in rerun)) for u in updates)
    return tuple(u for u in kept if u.probes)


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def repository_root() -> Path:
    """The checkout this package runs from, or the working directory for an installed copy."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").is_file() and (here / "probes").is_dir() else Path.cwd()


@dataclass(frozen=True)
class Layout:
    """Where fixtures, results indexes, reports and the docs page are read and written."""

    fixtures_root: Path
    results_root: Path | None  # None: results.json sits inside each fixture folder
    reports_dir: Path
    docs_page: Path | None

    @classmethod
    def repository(cls, root: Path | None = None) -> Layout:
        root = root or repository_root()
        return cls(
            fixtures_root=root / "tests" / "fixtures" / "providers",
            results_root=None,
            reports_dir=root / "reports",
            docs_page=root / "docs" / "local-servers.md",
        )

    @classmethod
    def out(cls, out: Path) -> Layout:
        return cls(
            fixtures_root=out / "fixtures",
            results_root=out / "results",
            reports_dir=out / "reports",
            docs_page=None,
        )

    def fixture_dir(self, key: str) -> Path:
        return self.fixtures_root / key

    def results_path(self, key: str) -> Path:
        if self.results_root is None:
            return self.fixture_dir(key) / RESULTS_FILE
        return self.results_root / f"{key}.json"

    def partial_dir(self, key: str) -> Path:
        return self.fixtures_root / f"{key}.partial"

    def provenance_path(self, key: str) -> Path:
        return self.fixture_dir(key) / PROVENANCE_FILE

    def cassette(self, key: str, probe_id: str) -> Path:
        return self.fixture_dir(key) / f"{probe_id}{CASSETTE_SUFFIX}"


def load_results(path: Path) -> Recording:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultsError(f"expected a results index at {path}: {exc}") from exc
    if data.get("format") != FORMAT:
        raise ResultsError(f"{path}: expected format {FORMAT}, got {data.get('format')!r}")
    try:
        probes = tuple(ProbeResult(**p) for p in data["probes"])
        updates = tuple(Update(**{**u, "probes": tuple(u["probes"])}) for u in data.get("updates", ()))
        header = {k: v for k, v in data.items() if k not in ("format", "probes", "updates")}
        return Recording(**header, probes=probes, updates=updates)
    except (KeyError, TypeError) as exc:
        raise ResultsError(f"{path}: not a format-{FORMAT} results index ({exc})") from exc


def save_results(recording: Recording, path: Path) -> None:
    write_atomically(path, dump_json(recording.to_json()))


def read_provenance(path: Path) -> Provenance:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultsError(f"expected a provenance file at {path}: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ResultsError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return Provenance.from_json(data, path)


def write_provenance(path: Path, provenance: Provenance) -> None:
    write_atomically(path, dump_json(provenance.to_json()))


def dump_json(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """Write beside the file, then rename over it: an interrupted write leaves the old file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.write_text(text, encoding="utf-8")
    os.replace(scratch, path)


def iter_recordings(layout: Layout) -> Iterator[Recording]:
    """Every complete recording under the layout, sorted by key (partial runs are not recordings)."""
    if layout.results_root is None:
        paths = sorted(layout.fixtures_root.glob(f"*/{RESULTS_FILE}"))
        paths = [
            p for p in paths if not p.parent.name.endswith(".partial") and not p.parent.name.startswith(".")
        ]
    else:
        paths = sorted(layout.results_root.glob("*.json"))
    for path in paths:
        yield load_results(path)


def replace_dir(source: Path, target: Path) -> None:
    """Move a finished folder into place; the old one is removed only once the new one is there."""
    target.parent.mkdir(parents=True, exist_ok=True)
    old = target.with_name(f"{target.name}.old-{os.getpid()}")
    if target.exists():
        target.rename(old)
    source.rename(target)
    if old.exists():
        shutil.rmtree(old)


# --- installing a run -------------------------------------------------------------------------------


def check_merge(layout: Layout, key: str, model: str, *, whole: bool) -> None:
    """Refuse, before anything is sent, a selection whose answers would sit in one recording with
    answers from another model (the key names the server and release, not the model)."""
    results_path = layout.results_path(key)
    if whole or not results_path.exists():
        return
    existing = load_results(results_path)
    if existing.model != model:
        raise MergeError(
            f"{key} was recorded with model {existing.model!r}, this run asks {model!r}: --only would "
            f"mix the two in one recording; pass --model {existing.model}, run every probe, or write "
            "elsewhere with --out"
        )


def install_partial(scratch: Path, layout: Layout, recording: Recording, provenance: Provenance) -> Path:
    """A run with unanswered probes goes beside the recording, never over it."""
    destination = layout.partial_dir(recording.key)
    save_results(recording, scratch / RESULTS_FILE)
    write_provenance(scratch / PROVENANCE_FILE, provenance)
    if destination.exists():
        shutil.rmtree(destination)
    replace_dir(scratch, destination)
    return destination


def install(
    scratch: Path, layout: Layout, recording: Recording, provenance: Provenance, *, whole: bool
) -> tuple[Path, bool]:
    """Move a fully answered run into place; a selection is merged into what is there.

    Returns the recording's folder and whether the run was merged.
    """
    key = recording.key
    destination = layout.fixture_dir(key)
    results_path = layout.results_path(key)
    merge = not whole and (results_path.exists() or destination.exists())
    if merge:
        recording, provenance = _merge(scratch, destination, layout, recording, provenance)
    write_provenance(scratch / PROVENANCE_FILE, provenance)
    if layout.results_root is None:
        save_results(recording, scratch / RESULTS_FILE)
    # One rename puts the folder in place; until then the old one stands untouched.
    replace_dir(scratch, destination)
    if layout.results_root is not None:
        save_results(recording, results_path)
    return destination, merge


def _merge(
    scratch: Path, destination: Path, layout: Layout, recording: Recording, provenance: Provenance
) -> tuple[Recording, Provenance]:
    """The existing recording with this selection's answers in place of its old ones, built in
    `scratch` (which holds the new cassettes): the index and provenance it should now carry."""
    results_path = layout.results_path(recording.key)
    old = load_results(results_path) if results_path.exists() else _unindexed(recording, destination)
    fresh = {r.id: r for r in recording.probes}
    owned = {f"{probe_id}{CASSETTE_SUFFIX}" for probe_id in fresh} | {PROVENANCE_FILE}
    if layout.results_root is None:
        owned.add(RESULTS_FILE)
    if destination.exists():
        for item in destination.iterdir():
            if item.name not in owned:
                copy = shutil.copytree if item.is_dir() else shutil.copy2
                copy(item, scratch / item.name)
    probes = tuple(fresh.get(r.id, r) for r in old.probes)
    probes += tuple(r for r in recording.probes if old.result(r.id) is None)
    update = Update(recording.recorded_on, recording.command, tuple(sorted(fresh)))
    merged = replace(old, probes=probes, updates=(*without_rerun(old.updates, fresh), update))
    # The header keeps describing the first run; each later run says what it was and which probes it owns.
    previous = _provenance_of(old, destination / PROVENANCE_FILE)
    later = (*without_rerun(previous.updates, fresh), LaterRun(provenance.run, update.probes))
    return merged, replace(previous, updates=later)


def _unindexed(recording: Recording, destination: Path) -> Recording:
    """A fixture folder without its results index: no verdicts to keep (its cassettes are kept all
    the same), and the run that made it as its provenance file tells, when there is one."""
    path = destination / PROVENANCE_FILE
    told = read_provenance(path).run if path.exists() else Run()
    header = {f: getattr(told, f) for f in ("model_name", "recorded_on", "command") if getattr(told, f)}
    return replace(recording, probes=(), **header)


def _provenance_of(recording: Recording, path: Path) -> Provenance:
    """The recording's provenance file, or what its index says of the run when there is none."""
    if path.exists():
        return read_provenance(path)
    return Provenance(recording.key, "recorded live; no provenance file was kept", Run.of(recording))
