"""The results index (format 1) and where recordings live on disk.

A recording is one run against one server release, identified by `<server>-<release>`. Its cassettes,
provenance and results index sit together; reports are built from those files alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

FORMAT = 1
Outcome = Literal["supported", "ignored", "refused", "info", "fault", "timeout", "not-run"]
OUTCOMES: tuple[Outcome, ...] = ("supported", "ignored", "refused", "info", "fault", "timeout", "not-run")
#: Outcomes meaning the probe got no answer to classify.
UNANSWERED: frozenset[str] = frozenset({"fault", "timeout", "not-run"})


class ResultsError(ValueError):
    """A results index on disk is not format 1; the message names the file and what was wrong."""


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
        fields = {k: v for k, v in data.items() if k not in ("format", "probes", "updates")}
        return Recording(**fields, probes=probes, updates=updates)
    except (KeyError, TypeError) as exc:
        raise ResultsError(f"{path}: not a format-{FORMAT} results index ({exc})") from exc


def dump_json(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def save_results(recording: Recording, path: Path) -> None:
    write_atomically(path, dump_json(recording.to_json()))


def write_atomically(path: Path, text: str) -> None:
    """Write beside the file, then rename over it: an interrupted write leaves the old file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.write_text(text, encoding="utf-8")
    os.replace(scratch, path)


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
            return self.fixture_dir(key) / "results.json"
        return self.results_root / f"{key}.json"

    def partial_dir(self, key: str) -> Path:
        return self.fixtures_root / f"{key}.partial"


def iter_recordings(layout: Layout) -> Iterator[Recording]:
    """Every complete recording under the layout, sorted by key (partial runs are not recordings)."""
    if layout.results_root is None:
        paths = sorted(layout.fixtures_root.glob("*/results.json"))
        paths = [
            p for p in paths if not p.parent.name.endswith(".partial") and not p.parent.name.startswith(".")
        ]
    else:
        paths = sorted(layout.results_root.glob("*.json"))
    for path in paths:
        yield load_results(path)


def with_probes(recording: Recording, probes: tuple[ProbeResult, ...]) -> Recording:
    return replace(recording, probes=probes)


def write_provenance(path: Path, provenance: Mapping[str, Any]) -> None:
    write_atomically(path, dump_json(provenance))


def read_provenance(path: Path) -> dict[str, Any]:
    try:
        return cast(dict[str, Any], json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultsError(f"expected a provenance file at {path}: {exc}") from exc


def replace_dir(source: Path, target: Path) -> None:
    """Move a finished folder into place; the old one is removed only once the new one is there."""
    target.parent.mkdir(parents=True, exist_ok=True)
    old = target.with_name(f"{target.name}.old-{os.getpid()}")
    if target.exists():
        target.rename(old)
    source.rename(target)
    if old.exists():
        _remove_tree(old)


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)
