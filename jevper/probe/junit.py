"""A run as JUnit XML (`--junit FILE`), the format CI systems read: one test suite per topic, one test
case per probe.

A case fails when its answer breaks a specification (grade "fail") or its verdict changed against
the baseline; a probe that got no answer is an error; a probe only the baseline holds is skipped. The
message of each carries the evidence and the cassette's path, so a reader of the CI page can judge it
without the recording at hand.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from jevper._atomic import write_atomically
from jevper.probe.recording import Recording
from jevper.probe.summary import Missing, ProbeLine


def _case_of(line: ProbeLine, suite: ET.Element, key: str) -> tuple[bool, bool]:
    """Append the probe's case to the suite; returns (failed, errored)."""
    case = ET.SubElement(
        suite,
        "testcase",
        name=line.id,
        classname=f"jevper.probe.{key}.{line.topic}",
        time=f"{line.elapsed_s or 0.0:.3f}",
    )
    where = f"cassette: {line.cassette}" if line.cassette else "cassette: none (no answer was recorded)"
    said = f"verdict: {line.verdict}\noutcome: {line.outcome}; status: {_status(line.status)}"
    evidence = f"evidence:\n{line.evidence or '(none)'}"
    failed = errored = False
    if line.unanswered:
        errored = True
        error = ET.SubElement(case, "error", message=f"no answer: {line.verdict}; {where}", type=line.outcome)
        error.text = f"{said}\n{where}"
    elif line.failed or line.counted_change:
        failed = True
        reasons = []
        if line.failed:
            reasons.append(f"breaks the API's specification: {line.verdict}")
        if line.counted_change and line.baseline is not None:
            reasons.append(
                f"verdict changed against the baseline ({line.why}): was {line.baseline.verdict!r}"
            )
        reasons.append(where)
        reasons.append(f"evidence: {_one_line(line.evidence)}")
        failure = ET.SubElement(
            case,
            "failure",
            message="; ".join(reasons),
            type="grade" if line.failed else "changed-verdict",
        )
        before = (
            f"\nbaseline: {line.baseline.verdict} (outcome {line.baseline.outcome}, "
            f"status {_status(line.baseline.status)})"
            if line.baseline is not None
            else ""
        )
        failure.text = f"{said}{before}\n{where}\n{evidence}"
    out = ET.SubElement(case, "system-out")
    out.text = f"{said}\n{where}" + (f"\nagainst the baseline: {line.change}" if line.change else "")
    return failed, errored


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split()) or "(none)"
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _status(status: int | None) -> str:
    return "no response" if status is None else str(status)


def render(recording: Recording, probes: Sequence[ProbeLine], absent: Sequence[Missing] = ()) -> str:
    """The JUnit XML document: suites in the order topics first appear, cases in the run's order."""
    root = ET.Element("testsuites", name=f"jevper.probe {recording.key}")
    suites: dict[str, ET.Element] = {}
    tally: dict[str, list[float]] = {}  # topic -> [tests, failures, errors, skipped, time]

    def suite_for(topic: str, title: str) -> ET.Element:
        if topic not in suites:
            suite = ET.SubElement(root, "testsuite", name=title, id=topic)
            properties = ET.SubElement(suite, "properties")
            for name, value in (
                ("server", recording.server),
                ("release", recording.release),
                ("model", recording.model),
                ("recording", recording.key),
            ):
                ET.SubElement(properties, "property", name=name, value=value)
            suites[topic], tally[topic] = suite, [0, 0, 0, 0, 0.0]
        return suites[topic]

    for line in probes:
        failed, errored = _case_of(line, suite_for(line.topic, line.topic_title), recording.key)
        counts = tally[line.topic]
        counts[0] += 1
        counts[1] += failed
        counts[2] += errored
        counts[4] += line.elapsed_s or 0.0
    for gone in absent:
        suite = suite_for(
            gone.topic, next((p.topic_title for p in probes if p.topic == gone.topic), gone.topic)
        )
        case = ET.SubElement(
            suite, "testcase", name=gone.id, classname=f"jevper.probe.{recording.key}.{gone.topic}"
        )
        ET.SubElement(case, "skipped", message=f"in the baseline ({gone.baseline.verdict}), not in this run")
        tally[gone.topic][0] += 1
        tally[gone.topic][3] += 1
    totals = [0.0] * 5
    for topic, suite in suites.items():
        counts = tally[topic]
        for name, value in zip(("tests", "failures", "errors", "skipped"), counts, strict=False):
            suite.set(name, str(int(value)))
        suite.set("time", f"{counts[4]:.3f}")
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
    for name, value in zip(("tests", "failures", "errors", "skipped"), totals, strict=False):
        root.set(name, str(int(value)))
    root.set("time", f"{totals[4]:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(
    path: Path, recording: Recording, probes: Sequence[ProbeLine], absent: Sequence[Missing] = ()
) -> None:
    write_atomically(path, render(recording, probes, absent))
