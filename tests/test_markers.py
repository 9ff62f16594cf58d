"""The test markers: every marker pyproject.toml declares has its row in CONTRIBUTING.md's table, and the
two say alike which are opt-in (left out of scripts/test's default run)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def declared() -> dict[str, str]:
    """Each marker pyproject.toml declares, with its description."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    lines: list[str] = config["tool"]["pytest"]["ini_options"]["markers"]
    return {name.strip(): text.strip() for name, _, text in (line.partition(":") for line in lines)}


def documented() -> dict[str, str]:
    """Each marker of CONTRIBUTING.md's table, with what its last column says of the default run."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("## Test markers\n", 1)[1].split("\n#", 1)[0]
    rows = (re.fullmatch(r"\| `([a-z_]+)` \|.*\| ([^|]+) \|", line) for line in section.splitlines())
    return {row.group(1): row.group(2).strip() for row in rows if row}


def test_every_declared_marker_has_its_row_in_contributing() -> None:
    missing = sorted(set(declared()) - set(documented()))
    assert not missing, f"expected a row in CONTRIBUTING.md's marker table for each of {missing}"
    assert sorted(documented()) == sorted(declared()), "a row for a marker pyproject.toml does not declare"


def test_pyproject_and_contributing_say_alike_which_markers_are_opt_in() -> None:
    opt_in = {name for name, text in declared().items() if text.startswith("opt in")}
    left_out = {name for name, column in documented().items() if column.startswith("no")}
    assert opt_in == left_out
    assert {"emulated", "keyless", "cluster", "slow"} <= opt_in
