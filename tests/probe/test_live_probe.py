"""Live runs against the embedded llama.cpp on loopback: verdicts, key hygiene, a server that dies."""

from __future__ import annotations

import filecmp
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from jevper.probe import cli
from jevper.probe.catalogue import load_catalogue
from jevper.probe.recording import Layout, Recording
from jevper.probe.runner import Sent
from jevper.servers.llamacpp import DEFAULT_RELEASE, RECIPE_ARGS, spawn_llamacpp

pytestmark = pytest.mark.live

CATALOGUE = load_catalogue()
COMMITTED = Layout.repository()
KEY = f"llamacpp-{DEFAULT_RELEASE}"
API_KEY = "sk-jevper-live-test-7f3a9c1e5b"
#: Verdicts that do not depend on what the model chose to say (routes, statuses, refusals, shapes).
DETERMINISTIC = [p.id for p in CATALOGUE.probes if p.deterministic]


@pytest.fixture(scope="module")
def keyed_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, str]]:
    """One run of every deterministic probe against a server that requires an API key."""
    out = tmp_path_factory.mktemp("live")
    with spawn_llamacpp(api_key=API_KEY, extra_args=RECIPE_ARGS) as server:
        only = [arg for probe_id in DETERMINISTIC for arg in ("--only", probe_id)]
        argv = ["--server", "llamacpp", "--base-url", server.base_url, "--api-key", API_KEY]
        argv += ["--release", server.version, "--out", str(out), "--timeout", "60", *only]
        status = cli.main(argv)
        yield out, status, server.version


def test_a_live_run_reproduces_every_deterministic_verdict_of_the_recording(
    keyed_run: tuple[Path, int, str],
) -> None:
    out, status, version = keyed_run
    assert status == 0
    fresh = Recording.load(out / "fixtures" / f"llamacpp-{version}")
    recorded = COMMITTED.load(KEY)
    assert [p.id for p in fresh.probes] == DETERMINISTIC
    for result in fresh.probes:
        old = recorded.result(result.id)
        assert old is not None
        assert (result.status, result.outcome, result.verdict) == (old.status, old.outcome, old.verdict), (
            result.id
        )


def test_a_run_given_an_api_key_leaves_no_trace_of_it_in_the_output(keyed_run: tuple[Path, int, str]) -> None:
    out, _, _ = keyed_run
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) > len(DETERMINISTIC)
    for path in files:
        assert API_KEY not in path.read_text(encoding="utf-8", errors="replace"), path
    provenance = (out / "fixtures" / KEY / "provenance.json").read_text()
    assert "<redacted>" in provenance


def test_killing_the_server_mid_run_leaves_fixtures_untouched_and_names_the_probes_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    committed = out / "fixtures" / KEY
    shutil.copytree(COMMITTED.fixture_dir(KEY), committed)
    before = sorted(p.name for p in committed.iterdir())
    with spawn_llamacpp(extra_args=RECIPE_ARGS) as server:
        pid = int(server.extra["pid"])
        shown = cli._progress

        def progress_then_kill(index: int, total: int, run: Sent) -> None:
            shown(index, total, run)
            if index == 3:
                os.kill(pid, signal.SIGKILL)

        monkeypatch.setattr(cli, "_progress", progress_then_kill)
        argv = ["--server", "llamacpp", "--base-url", server.base_url, "--release", DEFAULT_RELEASE]
        status = cli.main([*argv, "--out", str(out), "--only", "chat-*"])
    assert status == cli.EXIT_INCOMPLETE
    assert sorted(p.name for p in committed.iterdir()) == before
    mismatch = filecmp.dircmp(committed, COMMITTED.fixture_dir(KEY))
    assert not mismatch.diff_files and not mismatch.left_only
    partial = Recording.load(out / "fixtures" / f"{KEY}.partial")
    not_run = [p.id for p in partial.probes if p.outcome == "not-run"]
    assert not_run == [p.id for p in CATALOGUE.select(["chat-*"])][3:]
    err = capsys.readouterr().err
    assert "not run (no answer): chat-logprobs-no-tops, chat-logprobs-21-tops," in err
    assert "committed fixtures untouched" in err
