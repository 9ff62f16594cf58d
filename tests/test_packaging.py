"""The client installs lean: it imports none of the harness's dependencies, which are an extra."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ("vcr", "jinja2", "tabulate", "yaml")
#: What the gateway imports beyond the client (the `serve` extra).
GATEWAY = ("starlette", "uvicorn")


def blocking(modules: tuple[str, ...]) -> str:
    """Code that, run first in a fresh interpreter, makes any import of ``modules`` fail as if they were
    not installed."""
    return f"""
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {modules!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Absent())
"""


BLOCK = blocking(HARNESS + GATEWAY)


def python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + code, *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


def test_the_client_imports_without_any_dependency_of_the_harness_or_the_gateway() -> None:
    done = python(
        "import jevper, jevper.testing.faults\n"
        "from jevper import AsyncSystemOneClient, Choice, SystemOneClient\n"
        f"assert not {{m for m in sys.modules if m.split('.')[0] in {HARNESS + GATEWAY!r}}}\n"
        "print('ok')"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_probe_command_starts_without_the_sdks_types() -> None:
    # The openai SDK's types grade a Decisions answer; imported at start, they were half of the command's
    # start-up (0.4 s of 0.9 s for --help).
    code = (
        "import sys, jevper.probe.cli\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'openai', 'anthropic'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def without(modules: tuple[str, ...], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m args`` in an interpreter where ``modules`` cannot be imported (a sitecustomize blocks
    them before anything else runs)."""
    (tmp_path / "sitecustomize.py").write_text(blocking(modules), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join((str(tmp_path), str(ROOT)))},
    )


#: Each command line, a module its extra installs that it cannot run without, and that extra.
COMMANDS = [
    ("jevper.probe", HARNESS, "probe", ("list",)),
    ("jevper.serve", GATEWAY, "serve", ("--spawn",)),
    # The package imports without Uvicorn; its command line needs it.
    ("jevper.serve", ("uvicorn",), "serve", ("--spawn",)),
    ("jevper.batch", ("pyarrow",), "batch", ("in.csv", "out.csv", "--questions", "q.json")),
    ("jevper.evaluate", ("pyarrow",), "batch", ("in.csv", "--questions", "q.json", "--out", "eval")),
]


@pytest.mark.parametrize(
    ("command", "missing", "extra", "args"), COMMANDS, ids=[f"{c[0]}-{c[1][0]}" for c in COMMANDS]
)
def test_a_command_without_its_extra_says_in_one_line_which_extra_and_the_readme_s_install_command(
    command: str, missing: tuple[str, ...], extra: str, args: tuple[str, ...], tmp_path: Path
) -> None:
    done = without(missing, tmp_path, command, *args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got {lines}"
    assert f"python -m {command} needs the '{extra}' extra" in lines[0]
    assert f"pip install -e '.[{extra}]' in a checkout of jevper" in lines[0]
    assert "jevper[" not in lines[0].replace(".[", ""), "the registry's jevper is another project"
    # The README gives the same install command.
    assert "pip install -e '.[" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_a_program_importing_the_batch_without_its_extra_gets_the_same_line_as_its_error() -> None:
    program = (
        "try:\n    import jevper.batch\nexcept ModuleNotFoundError as exc:\n    print(exc.name, '|', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocking(("pyarrow",)) + program],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    name, _, message = done.stdout.strip().partition(" | ")
    assert message.startswith("jevper.batch needs the 'batch' extra"), message
    assert "pip install -e '.[batch]' in a checkout of jevper" in message
    assert name == "pyarrow"


def test_the_harness_dependencies_are_an_extra_and_not_the_clients() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {dep.split(">")[0].split("=")[0].split("[")[0] for dep in project["dependencies"]}
    assert names == {"httpx"}
    probe = {dep.split(">")[0] for dep in project["optional-dependencies"]["probe"]}
    assert probe == {"vcrpy", "jinja2", "tabulate", "pyyaml"}


PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_license_is_an_spdx_expression_which_the_build_backend_reads() -> None:
    # A TOML table is deprecated: every install printed setuptools' warning about it, twice.
    assert PYPROJECT["project"]["license"] == "MIT"
    assert PYPROJECT["build-system"]["requires"] == ["setuptools>=77"]  # the first to read the string


def test_every_folder_shipped_in_jevper_is_a_package_of_the_build() -> None:
    # One that is not (the templates were not) makes setuptools warn on every install.
    folders = {
        ".".join(path.relative_to(ROOT).parts)
        for path in (ROOT / "jevper").rglob("*")
        if path.is_dir() and path.name != "__pycache__"
    }
    packages = set(PYPROJECT["tool"]["setuptools"]["packages"])
    assert folders | {"jevper"} == packages - {"jevper.probes"}


def test_every_module_path_the_pyproject_cites_exists() -> None:
    cited = re.findall(r"jevper/[\w/]+\.py", (ROOT / "pyproject.toml").read_text())
    assert cited and [path for path in cited if not (ROOT / path).is_file()] == []
