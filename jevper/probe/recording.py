"""A recording, owned here: one object for one folder (its cassettes, results index and provenance),
loaded, saved, merged and installed in one place.

A recording is one run against one server release, identified by `<server>-<release>`, plus the
later runs of a few probes (`--only`) merged into it. Its folder holds one cassette per answered probe,
`results.json` (format 1: the header of the first run, each probe's verdict, the later runs) and
`provenance.json` (the first run in full, each later run in full). Both files are written from the
one `Recording`; nobody else builds a path inside its folder. A run is written into a scratch folder
and put in place by one atomic exchange of directories (``replace_dir``), only when every probe got
an answer; anything less goes beside it as `<key>.partial/`. A folder is read as a recording only
when its name is the key its index states, so a scratch, partial or half-installed folder never is.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from jevper._atomic import write_atomically
from jevper.probe.cassettes import CASSETTE_SUFFIX

FORMAT = 1
Outcome = Literal["supported", "ignored", "refused", "info", "fault", "timeout", "not-run", "ungraded"]
OUTCOMES: tuple[Outcome, ...] = (
    "supported",
    "ignored",
    "refused",
    "info",
    "fault",
    "timeout",
    "not-run",
    "ungraded",
)
#: Where a specification exists (the native System One route), an answer is also graded against it:
#: "fail" when it breaks the API, "pass" when it keeps it. Elsewhere verdicts stay descriptive (None).
Grade = Literal["pass", "fail"]
#: Outcomes meaning the probe got no answer to classify.
UNANSWERED: frozenset[str] = frozenset({"fault", "timeout", "not-run"})
PROVENANCE_FILE = "provenance.json"
RESULTS_FILE = "results.json"
#: The header fields that results.json repeats of the first run (provenance.json holds them all).
HEADER = ("server", "release", "model", "model_name", "recorded_on", "command")
#: Spellings of a command that have changed since a recording quoted them, and today's, so a report
#: quotes a command that runs (``{release}``: the recording's release). One table, read on load.
RESPELLED: tuple[tuple[str, str], ...] = (
    ("python -m jevper.probe.xllamacpp_server", "python -m jevper.servers.xllamacpp_server"),
    ("--binary built", "--release {release}"),
)


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
    grade: Grade | None = None
    #: A stability probe's numbers and grade (jevper.probe.stability.Measure.to_json); None elsewhere.
    stability: Mapping[str, Any] | None = None
    #: A confidence probe's finding: question type -> the formulas its figure matches; None elsewhere.
    confidence: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        # A grade is written only where a specification graded the answer, the stability record only for
        # a stability probe: other verdicts read as before.
        data = asdict(self)
        for optional in ("grade", "stability", "confidence"):
            if data[optional] is None:
                del data[optional]
        return data


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

    def respelled(self, release: str | None) -> Run:
        """This run with its commands (a server's flags among them) in today's spellings (RESPELLED)."""
        release = self.release or release
        flags = self.flags
        if flags is not None:
            flags = {k: _respell(v, release) if isinstance(v, str) else v for k, v in flags.items()}
        return replace(
            self,
            command=_respell(self.command, release),
            server_command=_respell(self.server_command, release),
            flags=flags,
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})


@dataclass(frozen=True)
class LaterRun:
    """A run merged into a recording after the first, and the probes whose answers it owns."""

    run: Run
    probes: tuple[str, ...]
    #: Written by jevper before 2026-11-29, which kept only the date and the probe ids in provenance.
    dated_only: bool = False

    def to_json(self) -> dict[str, Any]:
        if self.dated_only:
            return {"recorded_on": self.run.recorded_on, "probes": list(self.probes)}
        return {**self.run.to_json(), "probes": list(self.probes)}

    def index_json(self) -> dict[str, Any]:
        """As the results index lists it: when, how, and which probes."""
        return {"recorded_on": self.run.recorded_on, "command": self.run.command, "probes": list(self.probes)}


@dataclass(frozen=True)
class Recording:
    """One recording: the run that made it, every probe's verdict, the runs merged in since, and the
    folder holding its cassettes (None for a transcribed column, or a recording not yet saved)."""

    key: str
    run: Run
    probes: tuple[ProbeResult, ...] = ()
    #: Runs merged in after the first; each owns the probes it lists.
    later: tuple[LaterRun, ...] = ()
    provenance: Literal["recorded", "transcribed"] = "recorded"
    how: str = "recorded live"
    folder: Path | None = field(default=None, compare=False)
    #: The SDKs whose types graded the answers, and their versions (their limits move between releases).
    graded_with: Mapping[str, str] = field(default_factory=dict)

    # --- the first run's header, as the reports show it --------------------------------------------

    @property
    def server(self) -> str:
        return self.run.server or ""

    @property
    def release(self) -> str:
        return self.run.release or ""

    @property
    def model(self) -> str:
        return self.run.model or ""

    @property
    def model_name(self) -> str:
        return self.run.model_name or ""

    @property
    def recorded_on(self) -> str:
        return self.run.recorded_on or ""

    @property
    def command(self) -> str:
        return self.run.command or ""

    # --- verdicts and cassettes --------------------------------------------------------------------

    def result(self, probe_id: str) -> ProbeResult | None:
        return self._by_id.get(probe_id)

    @cached_property
    def _by_id(self) -> dict[str, ProbeResult]:
        """Each probe's result by its id (the first, were one listed twice): the reports look a result up
        for every cell of every table."""
        by_id: dict[str, ProbeResult] = {}
        for result in self.probes:
            by_id.setdefault(result.id, result)
        return by_id

    def run_of(self, probe_id: str) -> LaterRun | None:
        """The later run this probe's answer comes from, or None for the first run."""
        return next((u for u in self.later if probe_id in u.probes), None)

    def cassette(self, probe_id: str) -> Path:
        """Where this probe's cassette is (or would be) kept."""
        if self.folder is None:
            raise ValueError(f"recording {self.key!r} has no folder: transcribed, or not saved yet")
        return self.folder / f"{probe_id}{CASSETTE_SUFFIX}"

    def has_cassette(self, probe_id: str) -> bool:
        return self.folder is not None and self.cassette(probe_id).is_file()

    def with_probes(self, probes: tuple[ProbeResult, ...]) -> Recording:
        return replace(self, probes=probes)

    # --- on disk -----------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """results.json: format 1, the first run's header, the verdicts, the later runs (when any)."""
        data: dict[str, Any] = {"format": FORMAT, "key": self.key}
        data.update({name: getattr(self, name) for name in HEADER[:4]})
        data["provenance"] = self.provenance
        data.update({name: getattr(self, name) for name in HEADER[4:]})
        if self.graded_with:
            data["graded_with"] = dict(self.graded_with)
        data["probes"] = [p.to_json() for p in self.probes]
        # Written only when there is one, so an index made by a single run reads as it always did.
        if self.later:
            data["updates"] = [u.index_json() for u in self.later]
        return data

    def provenance_json(self) -> dict[str, Any]:
        """provenance.json: the first run in full, and each later run merged in."""
        data: dict[str, Any] = {"key": self.key, "how": self.how, **self.run.to_json()}
        if self.later:
            data["updates"] = [u.to_json() for u in self.later]
        return data

    def save(self, folder: Path | None = None) -> Recording:
        """Write results.json and provenance.json into `folder` (default: its own); each file is
        replaced atomically. Returns the recording as kept there."""
        where = folder or self.folder
        if where is None:
            raise ValueError(f"recording {self.key!r}: expected a folder to save into, got none")
        write_atomically(where / PROVENANCE_FILE, dump_json(self.provenance_json()))
        write_atomically(where / RESULTS_FILE, dump_json(self.to_json()))
        return replace(self, folder=where)

    @classmethod
    def load(cls, folder: Path) -> Recording:
        """The recording kept in `folder`; a ResultsError names the file that cannot be read."""
        index = _read_json(folder / RESULTS_FILE, "a results index")
        if index.get("format") != FORMAT:
            raise ResultsError(
                f"{folder / RESULTS_FILE}: expected format {FORMAT}, got {index.get('format')!r}"
            )
        told = folder / PROVENANCE_FILE
        try:
            probes = tuple(ProbeResult(**p) for p in index["probes"])
            header = {name: index[name] for name in HEADER}
            listed = [(u["recorded_on"], u["command"], tuple(u["probes"])) for u in index.get("updates", ())]
            key, kind = index["key"], index["provenance"]
        except (KeyError, TypeError) as exc:
            raise ResultsError(
                f"{folder / RESULTS_FILE}: not a format-{FORMAT} results index ({exc})"
            ) from exc
        if told.exists():
            how, first, later = _read_provenance(told)
        else:
            how, first = "recorded live; no provenance file was kept", Run()
            later = [
                LaterRun(Run(recorded_on=on, command=by), probes, dated_only=True)
                for on, by, probes in listed
            ]
        # The index is what the reports read: its header and its list of later runs are the ones kept.
        later = [
            replace(u, run=replace(u.run, recorded_on=on, command=by), probes=probes)
            for u, (on, by, probes) in zip(later, listed, strict=False)
        ] + later[len(listed) :]
        first = replace(first, **header).respelled(None)
        later = [replace(u, run=u.run.respelled(first.release)) for u in later]
        graded_with = index.get("graded_with") or {}
        return cls(key, first, probes, tuple(later), kind, how, folder, dict(graded_with))

    # --- merging a selection -----------------------------------------------------------------------

    def merged(self, selection: Recording) -> Recording:
        """This recording with the selection's answers in place of its own (a probe it lacks is added
        at the end): the header keeps describing the first run, and the selection becomes the last
        later run, owning its probes (an earlier run keeps only the probes not answered again)."""
        fresh = {r.id: r for r in selection.probes}
        probes = tuple(fresh.get(r.id, r) for r in self.probes)
        probes += tuple(r for r in selection.probes if self.result(r.id) is None)
        kept = (replace(u, probes=tuple(p for p in u.probes if p not in fresh)) for u in self.later)
        later = (*(u for u in kept if u.probes), LaterRun(selection.run, tuple(sorted(fresh))))
        return replace(
            self, probes=probes, later=later, graded_with=selection.graded_with or self.graded_with
        )


def recording_key(server: str, release: str) -> str:
    return f"{server}-{release}"


def _respell(command: str | None, release: str | None) -> str | None:
    if command is None:
        return None
    for old, new in RESPELLED:
        command = command.replace(old, new.format(release=release or "RELEASE"))
    return command


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def _read_json(path: Path, what: str) -> Mapping[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultsError(f"expected {what} at {path}: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ResultsError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _read_provenance(path: Path) -> tuple[str, Run, list[LaterRun]]:
    data = _read_json(path, "a provenance file")
    if not isinstance(data.get("key"), str) or not isinstance(data.get("how"), str):
        raise ResultsError(f"{path}: expected a provenance file with a key and how, got {sorted(data)}")
    try:
        later = [
            LaterRun(Run.from_json(u), tuple(u["probes"]), dated_only="command" not in u)
            for u in data.get("updates", ())
        ]
        if "updated_probes" in data:
            # The one earlier layout: the last selection's date and probe ids beside the header.
            later.append(
                LaterRun(Run(recorded_on=data.get("updated_on")), tuple(data["updated_probes"]), True)
            )
    except (KeyError, TypeError) as exc:
        raise ResultsError(f"{path}: a later run without its probes ({exc})") from exc
    return data["how"], Run.from_json(data), later


def repository_root() -> Path:
    """The checkout this package runs from, or the working directory for an installed copy."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").is_file() and (here / "probes").is_dir() else Path.cwd()


@dataclass(frozen=True)
class Layout:
    """Where recordings, reports and the docs page are read and written: the repository, or an
    `--out` folder laid out the same way (DIR/fixtures/<key>/, DIR/reports/)."""

    fixtures_root: Path
    reports_dir: Path
    docs_page: Path | None
    out_dir: Path | None = None  # the --out folder, None for the repository

    @classmethod
    def repository(cls, root: Path | None = None) -> Layout:
        root = root or repository_root()
        return cls(
            fixtures_root=root / "tests" / "fixtures" / "providers",
            reports_dir=root / "reports",
            docs_page=root / "docs" / "local-servers.md",
        )

    @classmethod
    def out(cls, out: Path) -> Layout:
        return cls(fixtures_root=out / "fixtures", reports_dir=out / "reports", docs_page=None, out_dir=out)

    def fixture_dir(self, key: str) -> Path:
        return self.fixtures_root / key

    def partial_dir(self, key: str) -> Path:
        return self.fixtures_root / f"{key}.partial"

    def holds(self, key: str) -> bool:
        return (self.fixture_dir(key) / RESULTS_FILE).is_file()

    def load(self, key: str) -> Recording:
        return Recording.load(self.fixture_dir(key))

    def find(self, reference: str) -> Recording:
        """A recording named by its key (under this layout), its results.json, or its folder."""
        path = Path(reference)
        folder = path.parent if path.is_file() and path.name == RESULTS_FILE else path
        if not (folder / RESULTS_FILE).is_file():
            folder = self.fixture_dir(reference)
        if not (folder / RESULTS_FILE).is_file():
            raise ResultsError(
                f"expected a recording key, a results.json or a recording folder; found none for "
                f"{reference!r} (looked for {path} and {folder / RESULTS_FILE})"
            )
        return Recording.load(folder)

    def recordings(self) -> Iterator[Recording]:
        """Every recording under the layout, sorted by key. A folder is one only when its name is the
        key its index states: a partial run, a scratch folder or a leftover of an install is not."""
        for path in sorted(self.fixtures_root.glob(f"*/{RESULTS_FILE}")):
            if path.parent.name.startswith("."):
                continue
            recording = Recording.load(path.parent)
            if recording.key == path.parent.name:
                yield recording


def iter_recordings(layout: Layout) -> Iterator[Recording]:
    return layout.recordings()


def dump_json(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


# --- installing a folder in one step ---------------------------------------------------------------

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _renameat2() -> Any:
    """glibc's renameat2 (2.28 and later), or None where the C library has none (macOS, musl < 1.2)."""
    with contextlib.suppress(OSError, AttributeError):
        function = ctypes.CDLL(None, use_errno=True).renameat2
        function.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
        function.restype = ctypes.c_int
        return function
    return None


_RENAMEAT2 = _renameat2()


def exchange(source: Path, target: Path) -> bool:
    """Swap two directories in one atomic step (Linux's renameat2 with RENAME_EXCHANGE); False when
    this system or filesystem cannot, and nothing was changed."""
    if _RENAMEAT2 is None:
        return False
    done = _RENAMEAT2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_EXCHANGE)
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), str(source), None, str(target))


def replace_dir(source: Path, target: Path) -> None:
    """Put the finished folder `source` at `target` in one atomic step: a crash leaves either the old
    folder or the new one at `target`, never neither, and never a half of either.

    A first install is one rename. Over an existing folder, Linux exchanges the two in one call and the
    old one, now at `source`'s hidden scratch name, is removed after. Where the exchange is not
    available (not Linux, or a filesystem without it) the old folder is first renamed to a hidden
    `.<name>.old-<pid>`: a crash between that rename and the next leaves no folder at `target`, and
    the old one is moved back by the next ``replace_dir`` for the same target. Hidden leftovers are
    never read as recordings (``Layout.recordings``)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _recover(target)
    if not target.exists():
        source.rename(target)
        return
    if exchange(source, target):
        shutil.rmtree(source)
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    target.rename(old)
    source.rename(target)
    shutil.rmtree(old)


def _recover(target: Path) -> None:
    """A fallback install that crashed between its renames left the old folder hidden: put it back."""
    if target.exists():
        return
    for left in sorted(target.parent.glob(f".{target.name}.old-*")):
        left.rename(target)
        return


# --- installing a run ------------------------------------------------------------------------------


def check_merge(layout: Layout, key: str, model: str, *, whole: bool) -> None:
    """Refuse, before anything is sent, a selection whose answers would sit in one recording with
    answers from another model (the key names the server and release, not the model)."""
    if whole or not layout.holds(key):
        return
    existing = layout.load(key)
    if existing.model != model:
        raise MergeError(
            f"{key} was recorded with model {existing.model!r}, this run asks {model!r}: --only would "
            f"mix the two in one recording; pass --model {existing.model}, run every probe, or write "
            "elsewhere with --out"
        )


def install_partial(run: Recording, layout: Layout) -> Recording:
    """A run with unanswered probes goes beside the recording, never over it. `run.folder` is the
    scratch folder holding its cassettes."""
    assert run.folder is not None, "a run is installed from the scratch folder holding its cassettes"
    destination = layout.partial_dir(run.key)
    run.save()
    if destination.exists():
        shutil.rmtree(destination)
    replace_dir(run.folder, destination)
    return replace(run, folder=destination)


def install(run: Recording, layout: Layout, *, whole: bool) -> tuple[Recording, bool]:
    """Put a fully answered run in place; a selection is merged into what is there. `run.folder` is
    the scratch folder holding its cassettes. Returns the recording installed and whether it merged."""
    scratch = run.folder
    assert scratch is not None, "a run is installed from the scratch folder holding its cassettes"
    destination = layout.fixture_dir(run.key)
    merge = not whole and destination.exists()
    recording = run
    if merge:
        existing = layout.load(run.key) if layout.holds(run.key) else _unindexed(run, destination)
        recording = existing.merged(run)
        owned = {run.cassette(r.id).name for r in run.probes} | {PROVENANCE_FILE, RESULTS_FILE}
        for item in destination.iterdir():
            if item.name not in owned:
                copy = shutil.copytree if item.is_dir() else shutil.copy2
                copy(item, scratch / item.name)
    recording = recording.save(scratch)
    # One step puts the folder in place; until then the old one stands untouched.
    replace_dir(scratch, destination)
    return replace(recording, folder=destination), merge


def _unindexed(run: Recording, destination: Path) -> Recording:
    """A fixture folder without its results index: no verdicts to keep (its cassettes are kept all
    the same), and the run that made it as its provenance file tells, when there is one."""
    path = destination / PROVENANCE_FILE
    if not path.exists():
        return replace(run, probes=(), how="recorded live; no provenance file was kept")
    how, told, later = _read_provenance(path)
    header = {f: getattr(told, f) for f in ("model_name", "recorded_on", "command") if getattr(told, f)}
    first = replace(told, **{**{f: getattr(run.run, f) for f in HEADER}, **header})
    return replace(run, run=first, probes=(), later=tuple(later), how=how)
