"""Benchmark results as data, and reports/performance.md rendered from them.

Each benchmark returns a ``Section`` of ``Figure``s; the runner keeps the latest section of each kind
in reports/performance.json, committed beside the report, so running one benchmark in any checkout
regenerates the report with the others' last committed numbers (each section carries its own date and
load average, and a figure measured apart from its section's run its own date).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "reports" / "performance.json"
REPORT = ROOT / "reports" / "performance.md"
ORDER = (
    "client",
    "throughput",
    "cache",
    "probe",
    "suite",
    "gateway",
    "batch",
    "engines",
    "calibration",
    "answers",
    "clusters",
    "escalation",
)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def median_p90(samples: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]


@dataclass(frozen=True)
class Figure:
    """One measured number next to its target; ``met`` is None where there is no target."""

    name: str
    value: float | None
    unit: str
    target: str
    met: bool | None
    load: list[float]
    detail: str = ""
    #: When a figure was measured apart from its section's run (a part of it run again); else "".
    measured_at: str = ""

    def shown(self) -> str:
        if self.value is None:
            return "not measured"
        digits = 3 if abs(self.value) < 10 else 1
        return f"{self.value:.{digits}f} {self.unit}".rstrip()


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    command: str
    figures: list[Figure]
    notes: list[str] = field(default_factory=list)
    table: list[list[str]] = field(default_factory=list)  # first row is the header
    measured_at: str = field(default_factory=now)


def with_part_anew(
    key: str, title: str, command: str, figures: list[Figure], notes: list[str], anew: Callable[[str], bool]
) -> Section:
    """Section ``key`` after a part of it was measured again: the last run's figures and notes stay, but
    for those that ``anew`` names, whose place ``figures`` and ``notes`` take, each figure stamped with
    the time it was measured."""
    earlier = load_sections().get(key)
    when = now()
    return Section(
        key=key,
        title=title,
        command=earlier.command if earlier else command,
        figures=[
            *(f for f in (earlier.figures if earlier else []) if not anew(f.name)),
            *(replace(f, measured_at=when) for f in figures),
        ],
        notes=[*(n for n in (earlier.notes if earlier else []) if not anew(n)), *notes],
        measured_at=earlier.measured_at if earlier else when,
    )


def load_sections() -> dict[str, Section]:
    if not RESULTS.exists():
        return {}
    raw: dict[str, Any] = json.loads(RESULTS.read_text())
    sections = {}
    for key, data in raw.items():
        figures = [Figure(**f) for f in data.pop("figures")]
        sections[key] = Section(figures=figures, **data)
    return sections


def save_sections(sections: dict[str, Section]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({k: asdict(s) for k, s in sections.items()}, indent=1) + "\n")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", "jevper"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes under jevper/)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> list[tuple[str, str]]:
    llama = _version("xllamacpp")
    release = f"b{llama.split('.')[2]}" if llama.count(".") >= 2 else llama
    return [
        ("CPU", f"{_cpu()}, {os.cpu_count()} logical cores (shared with other builds and test runs)"),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("Python", platform.python_version()),
        ("jevper", f"{_version('jevper')} at commit {_commit()}"),
        ("openai SDK", _version("openai")),
        ("httpx", _version("httpx")),
        (
            "llama.cpp",
            f"{release} (xllamacpp {llama}), SmolLM2-135M-Instruct as F16, CPU, for the benchmarks that "
            "start a server; the overhead benchmarks replay a body recorded from b10434 instead",
        ),
    ]


def _mark(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "—"}[met]


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return lines


def render(sections: dict[str, Section]) -> str:
    lines = [
        "# Performance",
        "",
        "<!-- Generated by scripts/bench (tests/bench/run.py); do not edit by hand. -->",
        "",
        "Generated by `scripts/bench`; each figure stands next to its target, with the 1/5/15-minute "
        "load average read when it was measured. The machine is shared, so every number is one "
        "run's measurement, not a lower bound.",
        "",
        "## Machine",
        "",
        *_table([["", ""], *[[k, v] for k, v in machine()]]),
        "",
        "## Summary",
        "",
    ]
    rows = [["Figure", "Measured", "Target", "", "Load average", "When"]]
    for key in ORDER:
        section = sections.get(key)
        if section is None:
            rows.append([f"{key}: not measured", "—", "—", "—", "—", "—"])
            continue
        for f in section.figures:
            load = " / ".join(f"{x:.2f}" for x in f.load)
            when = f.measured_at or section.measured_at
            rows.append([f.name, f.shown(), f.target or "—", _mark(f.met), load, when])
    lines += _table(rows)
    for key in ORDER:
        section = sections.get(key)
        if section is None:
            continue
        lines += [
            "",
            f"## {section.title}",
            "",
            f"Measured {section.measured_at} by `{section.command}`.",
            "",
        ]
        if section.table:
            lines += [*_table(section.table), ""]
        for f in section.figures:
            if f.detail:
                apart = f" (measured {f.measured_at}, apart from the rest)" if f.measured_at else ""
                lines.append(f"- **{f.name}**{apart}: {f.detail}")
        if any(f.detail for f in section.figures):
            lines.append("")
        for note in section.notes:
            lines += [note, ""]
    return "\n".join(lines).rstrip() + "\n"
