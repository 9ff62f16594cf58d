"""The peer conformance suite for System One servers (`jevcompat`), run as a black box.

Installed from the registry into an environment of its own (like callo), and run as its command line:
``jevcompat test ROOT [--key K] --json OUT``. Its JSON report is read here for the verdict of each
requirement; nothing else of it is used.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jevper.servers.process import SpawnError
from jevper.servers.toolenv import tool_env

JEVCOMPAT_REQUIREMENT = "jevcompat==0.1.1"
KEY_ENV = "JEVCOMPAT_KEY"  # the key reaches the suite through its environment, never its command line


@dataclass(frozen=True)
class Requirement:
    id: str
    level: str  # MUST or SHOULD
    status: str  # pass, fail or skip
    reason: str  # why it was skipped
    findings: tuple[str, ...]  # what failed, in the suite's words


@dataclass(frozen=True)
class SuiteRun:
    version: str
    seconds: float
    requirements: tuple[Requirement, ...]
    summary: dict[str, Any]
    incomplete: tuple[str, ...]  # the suite's aborted, inconclusive and case errors

    def with_status(self, status: str) -> dict[str, Requirement]:
        return {r.id: r for r in self.requirements if r.status == status}

    def counts(self) -> str:
        parts = []
        for level in ("MUST", "SHOULD"):
            of = [r for r in self.requirements if r.level == level]
            passed = sum(r.status == "pass" for r in of)
            skipped = sum(r.status == "skip" for r in of)
            parts.append(f"{level} {passed}/{len(of)} passed ({skipped} not exercised)")
        return ", ".join(parts)


def run_suite(
    root: str, *, key: str | None = None, timeout: float = 120.0, limit: float = 1800.0
) -> SuiteRun:
    """The suite against the server at ``root`` (no /v1), with a key (its auth checks on) or without."""
    env = tool_env("jevcompat", JEVCOMPAT_REQUIREMENT)
    with tempfile.TemporaryDirectory(prefix="jevcompat-") as folder:
        report = Path(folder) / "report.json"
        command = [str(env.program("jevcompat")), "test", root, "--json", str(report)]
        command += ["--timeout", f"{timeout:g}", "--evidence", "3"]
        environment = {k: v for k, v in os.environ.items() if k != KEY_ENV}
        if key is not None:
            environment[KEY_ENV] = key
            command += ["--key-env", KEY_ENV]
        started = time.monotonic()
        done = subprocess.run(
            command, capture_output=True, text=True, env=environment, timeout=limit, check=False
        )
        seconds = time.monotonic() - started
        if not report.exists():
            raise SpawnError(
                f"jevcompat wrote no report (exit {done.returncode}): {(done.stderr or done.stdout)[-1500:]}"
            )
        body = json.loads(report.read_text())
    requirements = tuple(
        Requirement(
            r["id"],
            r["level"],
            r["status"],
            r.get("reason", ""),
            tuple(f"{f.get('case', '')}: {f.get('message', '')}" for f in r.get("findings", [])),
        )
        for r in body["results"]
    )
    incomplete = [f"aborted: {body['aborted']}"] if body.get("aborted") else []
    incomplete += [f"inconclusive: {i}" for i in body.get("inconclusive") or []]
    incomplete += [f"case error: {e}" for e in body.get("case_errors") or []]
    return SuiteRun(env.version("jevcompat"), seconds, requirements, body["summary"], tuple(incomplete))
