"""The gate against the embedded llama.cpp: a baseline of the real server, then a run through a fault
server relaying to it that changes one answer, live and replayed offline; and docs/ci.md's recipe,
run as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml

from jevper.probe import cli
from jevper.probe.catalogue import load_catalogue
from jevper.probe.compose import requests_for
from jevper.probe.presets import get_preset
from jevper.servers import SpawnedServer
from jevper.servers.model import embedded_model_path
from jevper.servers.process import free_port
from jevper.testing.faults import route, running

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
#: Probes whose verdicts do not depend on what the model says, on three surfaces.
ONLY = ("chat-bad-model", "chat-n-two", "chat-stream-zero", "chat-unknown-field", "responses-bad-model")
CHANGED = "chat-stream-zero"


def rotation(probe_id: str, fault: str) -> tuple[str, ...]:
    """One fault name per POST the fault server sees, `fault` on the probe's own request."""
    catalogue, preset = load_catalogue(), get_preset("llamacpp")
    names: list[str] = []
    for probe in catalogue.select(list(ONLY)):
        posts = [r for r in requests_for(probe, catalogue, preset) if r.method == "POST" and route(r.path)]
        names += ["ok"] * (len(posts) - 1) + [fault if probe.id == probe_id else "ok"]
    return tuple(names)


def probe(server_url: str, release: str, out: Path, *extra: str) -> int:
    argv = ["--server", "llamacpp", "--base-url", server_url, "--release", release]
    argv += ["--out", str(out), "--timeout", "120", *extra]
    return cli.main([*argv, *(arg for probe_id in ONLY for arg in ("--only", probe_id))])


def test_a_fault_server_that_changes_one_answer_of_the_real_server_trips_the_gate_on_that_probe_alone(
    llamacpp: SpawnedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    release = llamacpp.version
    key = f"llamacpp-{release}"
    assert probe(llamacpp.base_url, release, tmp_path / "base") == 0
    baseline = str(tmp_path / "base" / "fixtures" / key)
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.json"
    root = llamacpp.base_url.removesuffix("/v1")

    with running(model="smollm2", upstream=root) as relay:
        same = probe(relay.base_url(), release, tmp_path / "same", "--baseline", baseline)
        capsys.readouterr()
        faulted = relay.base_url(*rotation(CHANGED, "html-500"))
        status = probe(faulted, release, tmp_path / "new", "--baseline", baseline, "--junit", str(junit))
        said = capsys.readouterr()
    assert same == 0  # relayed untouched, every verdict is the server's own
    assert status == 1, said.err
    assert f"tripped: {CHANGED}; 1 changed" in said.err
    document = JUnitXml.fromfile(str(junit))
    failing = [case.name for suite in document for case in suite if case.result]
    assert failing == [CHANGED]
    assert document.tests == len(ONLY)
    case = next(case for suite in document for case in suite if case.name == CHANGED)
    assert isinstance(case.result[0], Failure) and "status 400 -> 500" in case.result[0].message

    # The same pair offline, from the two recordings alone.
    capsys.readouterr()
    replayed = cli.main(
        ["replay", "--out", str(tmp_path / "new"), "--baseline", baseline, "--json", str(summary)]
    )
    assert replayed == 1
    assert f"tripped: {CHANGED}; 1 changed" in capsys.readouterr().err
    data = json.loads(summary.read_text(encoding="utf-8"))
    assert data["baseline"]["counted"] == [CHANGED]
    assert cli.main(["replay", "--out", str(tmp_path / "same"), "--baseline", baseline]) == 0


def recipe() -> str:
    """The script docs/ci.md gives, exactly as written there."""
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- the recipe: ci/probe\.sh -->\n```sh\n(.*?)\n```", text, re.S)
    assert found, "expected docs/ci.md to hold the recipe under '<!-- the recipe: ci/probe.sh -->'"
    return found[1] + "\n"


def run_recipe(folder: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    script = folder / "ci" / "probe.sh"
    script.parent.mkdir(exist_ok=True)
    script.write_text(recipe(), encoding="utf-8")
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        # The server under test: the embedded llama.cpp, started by the recipe as a project starts its own
        # (on one thread, as the tests' other servers: tests/_llama.py).
        "SERVER_COMMAND": f"python -m jevper.servers.xllamacpp_server -m {embedded_model_path()} "
        f"--port {port} --alias smollm2 --jinja --props --threads 1",
        "BASE_URL": f"http://127.0.0.1:{port}/v1",
        "PROBE_FLAGS": " ".join(f"--only {p}" for p in ONLY),
        **settings,
    }
    return subprocess.run(
        ["sh", str(script)], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_ci_recipe_runs_as_written_and_exits_by_what_changed(
    llamacpp: SpawnedServer, tmp_path: Path
) -> None:
    release = llamacpp.version
    # The baseline a project commits once: the release it trusts, recorded into probe-baseline/.
    made = run_recipe(tmp_path, RELEASE=release, BASELINE="", OUT="probe-baseline")
    assert made.returncode == 0, made.stderr[-3000:]
    gated = run_recipe(tmp_path, RELEASE=release, BASELINE=f"probe-baseline/fixtures/llamacpp-{release}")
    assert gated.returncode == 0, gated.stderr[-3000:]
    assert f"baseline llamacpp-{release} -> llamacpp-{release}: passed" in gated.stderr
    for artefact in ("junit.xml", "summary.json", "reports/index.html", "server.log"):
        assert (tmp_path / "artifacts" / "probe" / artefact).is_file(), artefact
    # A server that does not come up is reported as such, with the server's exit status 3.
    broken = run_recipe(tmp_path, RELEASE=release, SERVER_COMMAND="python -c 'raise SystemExit(1)'")
    assert broken.returncode == 3 and "server exited" in broken.stderr
