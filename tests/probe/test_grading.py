"""Grading is apart from recording: a failure to grade one probe costs that probe's verdict, never the
recording, live or offline; replaying reads the cassettes and sends nothing."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from jevper.probe import cli
from jevper.probe.catalogue import Probe, load_catalogue
from jevper.probe.classifiers import CLASSIFIERS
from jevper.probe.presets import get_preset
from jevper.probe.recording import Layout, Recording
from jevper.probe.session import RunReport, Target, record, replay
from jevper.testing.faults import FaultServer, running

CATALOGUE = load_catalogue()
COMMITTED = Layout.repository()
PROBES = ("chat-logprobs", "responses-logprobs", "messages-plain")
BROKEN = "chat-logprobs"


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with running(model="smollm2") as started:
        yield started


def record_on(server: FaultServer, probes: list[Probe], layout: Layout) -> RunReport:
    """Record `probes` from the fault server as llama.cpp release b1, into `layout`."""
    preset = get_preset("llamacpp").with_overrides(base_url=server.base_url(), model="smollm2")
    target = Target(preset, "b1", "fault server", "test")
    return record(target, probes, catalogue=CATALOGUE, layout=layout, api_key=None, timeout=5)


@pytest.fixture
def broken_classifier(monkeypatch: pytest.MonkeyPatch) -> str:
    """The classifier of one probe raises what a bug in it would (not a JevperError)."""

    def broken(probe: Probe, exchanges: object) -> object:
        raise KeyError("top_logprobs")

    name = CATALOGUE.get(BROKEN).classifier
    monkeypatch.setitem(CLASSIFIERS, name, broken)  # type: ignore[arg-type]
    return name


def test_a_classifier_that_raises_costs_its_probe_the_verdict_and_the_recording_is_kept(
    tmp_path: Path, server: FaultServer, broken_classifier: str
) -> None:
    layout = Layout.out(tmp_path)
    probes = [CATALOGUE.get(p) for p in PROBES if CATALOGUE.get(p).classifier != broken_classifier]
    probes.insert(0, CATALOGUE.get(BROKEN))

    report = record_on(server, probes, layout)

    installed = layout.load("llamacpp-b1")
    assert report.complete and installed == report.recording
    assert [r.id for r in installed.probes] == [p.id for p in probes]
    assert all(installed.has_cassette(p.id) for p in probes)
    ungraded = installed.result(BROKEN)
    assert ungraded is not None and ungraded.outcome == "ungraded" and ungraded.status == 200
    assert ungraded.verdict == "ungraded: KeyError: 'top_logprobs'"
    assert [r.outcome for r in installed.probes[1:]] == ["supported"] * (len(probes) - 1)


def test_the_command_line_says_which_probe_could_not_be_graded_and_exits_1(
    tmp_path: Path, server: FaultServer, broken_classifier: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--server", "llamacpp", "--base-url", server.base_url(), "--release", "b1"]
    status = cli.main([*argv, "--model", "smollm2", "--out", str(tmp_path), "--only", BROKEN])

    assert status == cli.EXIT_INCOMPLETE
    assert f"{BROKEN}: ungraded: KeyError: 'top_logprobs'" in capsys.readouterr().err
    assert Recording.load(tmp_path / "fixtures" / "llamacpp-b1").has_cassette(BROKEN)


def test_mending_the_classifier_and_replaying_grades_the_kept_cassette(
    tmp_path: Path, server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = CATALOGUE.get(BROKEN).classifier
    working = CLASSIFIERS[name]
    monkeypatch.setitem(CLASSIFIERS, name, lambda probe, exchanges: {}["top_logprobs"])
    argv = ["--server", "llamacpp", "--base-url", server.base_url(), "--release", "b1"]
    assert cli.main([*argv, "--model", "smollm2", "--out", str(tmp_path), "--only", BROKEN]) == 1

    monkeypatch.setitem(CLASSIFIERS, name, working)
    assert cli.main(["replay", "--out", str(tmp_path)]) == cli.EXIT_OK

    graded = Recording.load(tmp_path / "fixtures" / "llamacpp-b1").result(BROKEN)
    assert graded is not None and graded.outcome == "supported"


def test_a_cassette_that_cannot_be_read_costs_only_its_probe_on_replay(tmp_path: Path) -> None:
    key = "llamacpp-b10434"
    shutil.copytree(COMMITTED.fixture_dir(key), tmp_path / key)
    committed = Recording.load(tmp_path / key)
    committed.cassette(BROKEN).write_text("interactions: [\n  {request: ", encoding="utf-8")

    fresh = replay(committed, CATALOGUE.probes, catalogue=CATALOGUE)

    broken = fresh.result(BROKEN)
    assert broken is not None and broken.outcome == "ungraded"
    assert f"{BROKEN}.yaml: expected a vcrpy cassette, could not read it" in broken.verdict
    assert [r for r in fresh.probes if r.id != BROKEN] == [r for r in committed.probes if r.id != BROKEN]


def test_replay_reads_the_cassettes_and_needs_no_transport(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("replay sent a request")

    monkeypatch.setattr(httpx.Client, "send", refuse)
    recording = COMMITTED.load("llamacpp-b11549")
    assert replay(recording, CATALOGUE.probes, catalogue=CATALOGUE).to_json() == recording.to_json()


def test_a_cassette_whose_request_the_catalogue_no_longer_sends_asks_to_be_recorded_again(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    key = "llamacpp-b11549"
    recording = COMMITTED.load(key)
    probe = CATALOGUE.get("chat-grammar")
    changed = replace(probe, body={**probe.body, "temperature": 0.5})
    grown = replace(CATALOGUE, probes=tuple(changed if p.id == probe.id else p for p in CATALOGUE.probes))

    result = replay(recording, grown.probes, catalogue=grown).result(probe.id)

    assert result is not None and result.outcome == "fault"
    assert result.verdict == "the request is not in the cassette; record it again"


def test_a_run_that_fails_after_sending_keeps_its_cassettes_beside_the_recording(
    tmp_path: Path, server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jevper.probe import session

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(session, "install", full_disk)
    layout = Layout.out(tmp_path)

    with pytest.raises(OSError, match="No space left"):
        record_on(server, [CATALOGUE.get(p) for p in PROBES], layout)

    kept = layout.partial_dir("llamacpp-b1")
    assert sorted(p.name for p in kept.glob("*.yaml")) == sorted(f"{p}.yaml" for p in PROBES)
    assert [p.name for p in layout.fixtures_root.iterdir()] == [kept.name]
