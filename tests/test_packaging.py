"""The client installs lean: it imports none of the harness's dependencies, which are an extra."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ("vcr", "jinja2", "tabulate", "yaml")
#: What the gateway imports beyond the client (the `serve` extra).
GATEWAY = ("starlette", "uvicorn")
#: Runs first in a fresh interpreter: any import of a harness dependency fails, as if not installed.
BLOCK = f"""
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HARNESS + GATEWAY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
        return None
sys.meta_path.insert(0, Absent())
"""


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


def test_the_harness_without_its_extra_says_which_extra_to_install() -> None:
    done = python(
        "import runpy, sys; sys.argv = ['jevper.probe', 'list']\n"
        "runpy.run_module('jevper.probe', run_name='__main__')"
    )
    assert done.returncode == 2
    assert "pip install 'jevper[probe]'" in done.stderr
    assert "vcrpy" in done.stderr and "pyyaml" in done.stderr


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
