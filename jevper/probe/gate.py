"""The gate a CI job runs: every verdict of a run against the verdicts of a baseline recording.

A probe's verdict *changed* when its graded outcome, its grade, its HTTP status or its decisive fact
differs, or a stability probe's number moved by more than its tolerance; the decisive fact is the one
the probe's agreement rule names (the number of alternatives, where the trace went, a stability
grade, ...), recomputed from both cassettes. The matrix text alone may differ between two runs
of one server without anything having changed: it quotes what the model answered and which labels sit
among near-tied alternatives. Such a probe is listed as noise, never counted. A probe in one recording
only (a newer catalogue, a selection) is listed, and counted only when asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jevper._atomic import write_atomically
from jevper.probe import stability
from jevper.probe.cassettes import CassetteError, load_exchanges
from jevper.probe.catalogue import Catalogue, Probe
from jevper.probe.classifiers import classify
from jevper.probe.diff import ProbeChange, RecordingDiff, render
from jevper.probe.grading import dialects_of
from jevper.probe.recording import ProbeResult, Recording

Change = Literal["same", "changed", "noise", "new", "missing"]
#: The report's file under the run's reports folder (never under reports/changes/, which `report`
#: regenerates from two recordings of its own layout).
REPORT_NAME = "baseline-changes.md"


@dataclass(frozen=True)
class Entry:
    """One probe of either recording: how its verdict compares, and why (empty when the same)."""

    probe_id: str
    change: Change
    old: ProbeResult | None  # the baseline's
    new: ProbeResult | None  # the run's
    why: str = ""


@dataclass(frozen=True)
class Gate:
    baseline: Recording
    fresh: Recording
    entries: tuple[Entry, ...]
    count_missing: bool = False  # probes in one recording only count as changes

    def ids(self, change: Change) -> tuple[str, ...]:
        return tuple(e.probe_id for e in self.entries if e.change == change)

    def entry(self, probe_id: str) -> Entry | None:
        return next((e for e in self.entries if e.probe_id == probe_id), None)

    @property
    def counted(self) -> tuple[Entry, ...]:
        """The entries that trip the gate."""
        kinds = ("changed", "new", "missing") if self.count_missing else ("changed",)
        return tuple(e for e in self.entries if e.change in kinds)

    @property
    def tripped(self) -> bool:
        return bool(self.counted)

    def as_diff(self) -> RecordingDiff:
        """The change report's input: the counted changes and the probes in one recording only."""
        shown = [e for e in self.entries if e.change in ("changed", "new", "missing")]
        changes = tuple(
            ProbeChange(e.probe_id, _either(e).surface, _either(e).topic, e.old, e.new) for e in shown
        )
        compared = sum(1 for e in self.entries if e.old is not None and e.new is not None)
        return RecordingDiff(self.baseline, self.fresh, compared, changes)

    def summary(self) -> str:
        """One line for the terminal: what tripped the gate, or that nothing did."""
        old, new = self.baseline.key, self.fresh.key
        parts = [f"{len(self.ids('changed'))} changed"]
        one_sided: tuple[tuple[Change, str], ...] = (
            ("new", "not in the baseline"),
            ("missing", "only in the baseline"),
        )
        for change, words in one_sided:
            found = self.ids(change)
            if found:
                counted = "" if self.count_missing else ", not counted"
                parts.append(f"{len(found)} {words} ({', '.join(found)}{counted})")
        noise = self.ids("noise")
        if noise:
            parts.append(
                f"{len(noise)} with only the matrix text differing, not counted ({', '.join(noise)})"
            )
        verdict = "tripped" if self.tripped else "passed"
        named = f": {', '.join(e.probe_id for e in self.counted)}" if self.tripped else ""
        return f"baseline {old} -> {new}: {verdict}{named}; " + "; ".join(parts)


def _either(entry: Entry) -> ProbeResult:
    either = entry.new or entry.old
    assert either is not None  # every entry comes from one of the two recordings
    return either


#: probe id -> its decisive facts, recomputed from its cassette.
Facts = Mapping[str, Mapping[str, Any]]


def facts_of(source: Recording, catalogue: Catalogue) -> Facts:
    """Every probe's decisive facts from the recording's cassettes: read before a run that could write
    over them (a run compared with the recording it replaces)."""
    known = {p.id: p for p in catalogue.probes}
    spoken = dialects_of(source, catalogue)
    return {r.id: _facts(known.get(r.id), source, spoken) for r in source.probes}


def compare(
    baseline: Recording,
    fresh: Recording,
    catalogue: Catalogue,
    *,
    count_missing: bool = False,
    baseline_facts: Facts | None = None,
) -> Gate:
    """Every probe of either recording, in the run's order then the baseline's others."""
    old_facts = baseline_facts if baseline_facts is not None else facts_of(baseline, catalogue)
    before = {p.id: p for p in baseline.probes}
    after = {p.id: p for p in fresh.probes}
    known = {p.id: p for p in catalogue.probes}
    spoken = dialects_of(fresh, catalogue)
    entries = []
    for probe_id in [*after, *(i for i in before if i not in after)]:
        old, new = before.get(probe_id), after.get(probe_id)
        if old is None:
            entries.append(Entry(probe_id, "new", None, new))
        elif new is None:
            entries.append(Entry(probe_id, "missing", old, None))
        else:
            probe = known.get(probe_id)
            why = changed(old, new, old_facts.get(probe_id, {}), _facts(probe, fresh, spoken), probe)
            if why:
                entries.append(Entry(probe_id, "changed", old, new, why))
            elif old.verdict != new.verdict:
                entries.append(Entry(probe_id, "noise", old, new, "the matrix text alone"))
            else:
                entries.append(Entry(probe_id, "same", old, new))
    return Gate(baseline, fresh, tuple(entries), count_missing)


def changed(
    old: ProbeResult,
    new: ProbeResult,
    old_facts: Mapping[str, Any],
    new_facts: Mapping[str, Any],
    probe: Probe | None,
) -> str:
    """What differs between two verdicts of one probe that counts as a change ("" for nothing)."""
    for name, was, now in (
        ("outcome", old.outcome, new.outcome),
        ("grade", old.grade, new.grade),
        ("status", old.status, new.status),
    ):
        if was != now:
            return f"{name} {_shown(was)} -> {_shown(now)}"
    if not stability.same(old.stability, new.stability):
        return f"stability {_numbers(old.stability)} -> {_numbers(new.stability)}"
    rule = probe.compare if probe is not None else "outcome"
    if rule not in ("outcome", "status", "status-class") and rule in old_facts and rule in new_facts:
        was, now = old_facts[rule], new_facts[rule]
        if _plain(was) != _plain(now):
            return f"{rule} {_shown(was)} -> {_shown(now)}"
    return ""


def _facts(probe: Probe | None, recording: Recording, spoken: Mapping[str, str]) -> Mapping[str, Any]:
    """The probe's decisive facts, recomputed from the recording's cassette (none without one)."""
    if probe is None or recording.folder is None or not recording.has_cassette(probe.id):
        return {}
    try:
        exchanges = load_exchanges(recording.cassette(probe.id))
        return classify(probe, exchanges, spoken.get(probe.surface)).facts
    except CassetteError:
        return {}


def _numbers(record: Mapping[str, Any] | None) -> str:
    if record is None:
        return "none"
    return f"{record.get('grade')} (change {record.get('change')}, noise {record.get('noise')})"


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple | list) else value


def _shown(value: Any) -> str:
    return "none" if value is None else str(value)


def report(gate: Gate, report_path: Path | None = None) -> str:
    """The change report `diff` writes, over the changes the gate counts and the one-sided probes."""
    return render(gate.as_diff(), report_path)


def write_report(gate: Gate, reports_dir: Path) -> tuple[Path, str]:
    path = reports_dir / REPORT_NAME
    text = report(gate, path)
    write_atomically(path, text)
    return path, text
