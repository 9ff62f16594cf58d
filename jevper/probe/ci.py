"""What a CI job gets from a `record` or `replay` run: the exit status, the gate against a baseline,
and the JUnit and JSON files. `cli` adds the options and calls `Checks.finish` once a run is done.

The exit status: 0 when every probe was answered, no answer broke a specification (a grade of
"fail"; `--no-fail` lets those pass) and no verdict changed against the baseline; 1 otherwise. The
command's own usage and reachability statuses (2, 3) are `cli`'s.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from jevper.probe import gate, junit, summary
from jevper.probe.catalogue import Catalogue
from jevper.probe.diff import DiffError, resolve
from jevper.probe.recording import Layout, Recording

EXIT_OK, EXIT_FAILED = 0, 1


class BaselineError(ValueError):
    """The baseline named on the command line is not a recording; the message says where it looked."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("in CI: a gate on a baseline, grades, JUnit and JSON")
    group.add_argument(
        "--baseline",
        metavar="KEY",
        help="compare every verdict with this recording's (a key under --out or the repository, a "
        "results.json or a fixture folder) and exit 1 when any changed; the change report is printed",
    )
    group.add_argument(
        "--count-missing",
        action="store_true",
        help="with --baseline: count probes in one recording only as changes (default: listed only)",
    )
    group.add_argument(
        "--no-fail",
        action="store_true",
        help="exit 0 even when an answer breaks a specification (graded 'fail'); the grade is still reported",
    )
    group.add_argument("--junit", type=Path, metavar="FILE", help="write the run as JUnit XML")
    group.add_argument("--json", type=Path, metavar="FILE", help="write the run's summary as JSON")


def wanted(args: argparse.Namespace) -> bool:
    """Does the command line ask for any of these outputs?"""
    return bool(args.baseline or args.junit or args.json)


@dataclass(frozen=True)
class Checks:
    """The options, and the baseline as read before the run (a run may write over it)."""

    baseline: Recording | None
    baseline_facts: gate.Facts
    count_missing: bool
    no_fail: bool
    junit: Path | None
    json: Path | None

    @classmethod
    def prepare(cls, args: argparse.Namespace, layout: Layout, catalogue: Catalogue) -> Checks:
        baseline: Recording | None = None
        facts: gate.Facts = {}
        if args.baseline:
            try:
                found = resolve(args.baseline, layout)
            except DiffError as exc:
                raise BaselineError(f"--baseline: {exc}") from exc
            facts = gate.facts_of(found, catalogue)
            baseline = found
        return cls(baseline, facts, args.count_missing, args.no_fail, args.junit, args.json)

    def finish(
        self,
        recording: Recording,
        *,
        catalogue: Catalogue,
        reports_dir: Path,
        mode: str,
        status: int,
        command: str | None = None,
    ) -> int:
        """Grade, gate and write the files for a finished run; returns the exit status (given the
        run's own, `status`: 1 for unanswered probes)."""
        checked = None
        if self.baseline is not None:
            checked = gate.compare(
                self.baseline,
                recording,
                catalogue,
                count_missing=self.count_missing,
                baseline_facts=self.baseline_facts,
            )
        probes = summary.lines(recording, catalogue, checked)
        failures = [p for p in probes if p.failed]
        if failures:
            said = ", ".join(f"{p.id} ({p.verdict})" for p in failures)
            allowed = " (--no-fail: not counted)" if self.no_fail else ""
            print(f"breaks the API's specification{allowed}: {said}", file=sys.stderr)
            if not self.no_fail:
                status = EXIT_FAILED
        if checked is not None:
            path, text = gate.write_report(checked, reports_dir)
            print(text)
            print(checked.summary(), file=sys.stderr)
            print(f"change report written to {path}", file=sys.stderr)
            if checked.tripped:
                status = EXIT_FAILED
        absent = summary.missing(checked)
        if self.junit is not None:
            junit.write(self.junit, recording, probes, absent)
            print(f"JUnit written to {self.junit}", file=sys.stderr)
        if self.json is not None:
            data = summary.document(
                recording,
                probes,
                mode=mode,
                catalogue=catalogue,
                exit_status=status,
                gate=checked,
                command=command,
            )
            summary.write(self.json, data)
            print(f"summary written to {self.json}", file=sys.stderr)
        return status
