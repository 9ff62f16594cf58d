"""The README's first example, run as a reader would run it: copied out of the README into a file of its
own and started with this interpreter, against the embedded llama.cpp it spawns itself."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"^## Your first question\n.*?^```python\n(.*?)^```", text, re.S | re.M)
    assert found is not None, "expected a ```python block under the README's '## Your first question'"
    return found.group(1)


def test_the_readme_example_is_a_short_program_that_spawns_its_own_server() -> None:
    code = readme_example()
    lines = [line for line in code.splitlines() if line.strip()]
    assert 10 <= len(lines) <= 15, f"expected 10 to 15 lines of code, got {len(lines)}"
    assert "spawn_llamacpp()" in code
    compile(code, "README.md", "exec")


@pytest.mark.live
def test_the_readme_example_runs_as_written_and_prints_a_choice_and_a_probability(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(readme_example(), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, f"expected exit status 0, got {run.returncode}: {run.stderr[-2000:]}"
    choice_line, noul_line = run.stdout.strip().splitlines()[-2:]
    assert choice_line.split()[0] in {"billing", "technical"}, (
        f"expected an option first, got {choice_line!r}"
    )
    assert 0.0 <= float(noul_line) <= 1.0, f"expected a probability of yes, got {noul_line!r}"
