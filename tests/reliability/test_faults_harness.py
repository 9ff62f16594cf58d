"""The probe harness against a server that misbehaves: each fault is recorded as an outcome, the run goes
on, a crash mid-run leaves committed fixtures as they were, and the exit status says what happened."""

from __future__ import annotations

import filecmp
import shutil
import time
from pathlib import Path

import pytest

from jevper.probe import cli
from jevper.probe.catalogue import load_catalogue
from jevper.probe.presets import get_preset
from jevper.probe.recording import UNANSWERED, Layout, Recording
from jevper.probe.session import Target, record
from jevper.testing.faults import FAULTS, FaultServer

CATALOGUE = load_catalogue()
COMMITTED = Layout.repository()
KEY = "llamacpp-b10434"
TIMEOUT = 1.0
#: One probe per surface, each reading the body in its own way (Decisions' by its schema).
PROBES = ("chat-logprobs", "responses-logprobs", "messages-plain", "decisions-choice-strings")
#: The probe each is followed by (a run holds one cassette per probe, so not the same one again).
NEXT = (*PROBES[1:], PROBES[0])

# What the harness should record for the faulted probe, per probe above. "refused" is right for an HTML
# 500/404: the harness cannot tell a proxy's page from a server's refusal, and llama.cpp refuses some
# requests with a 500. A body whose defect the probe does not read (a NaN in a Messages answer the
# route probe never parses) is recorded as the answer it is. A Decisions body that is JSON but breaks the
# schema is graded, not a fault: "info", a failed grade, is the verdict on the server's conformance.
EXPECTED: dict[str, tuple[str, str, str, str]] = {
    "hang-no-bytes": ("timeout", "timeout", "timeout", "timeout"),
    "hang-after-headers": ("timeout", "timeout", "timeout", "timeout"),
    "connection-reset": ("fault", "fault", "fault", "fault"),
    "html-500": ("refused", "refused", "refused", "refused"),
    "502-retry-after": ("fault", "fault", "fault", "fault"),
    "503-retry-after": ("fault", "fault", "fault", "fault"),
    "429-retry-after": ("fault", "fault", "fault", "fault"),
    "429-retry-after-hour": ("fault", "fault", "fault", "fault"),
    "truncated-json": ("fault", "fault", "fault", "fault"),
    "non-json-body": ("fault", "fault", "fault", "fault"),
    "wrong-content-type": ("supported", "supported", "supported", "supported"),
    "html-404": ("refused", "refused", "refused", "refused"),
    "invalid-utf8-content": ("supported", "supported", "supported", "info"),
    "invalid-utf8-reasoning": ("supported", "supported", "supported", "supported"),
    "nan-logprob": ("fault", "fault", "supported", "info"),
    "infinity-logprob": ("fault", "fault", "supported", "info"),
    "positive-logprob": ("fault", "fault", "supported", "info"),
    "short-logprobs": ("supported", "supported", "supported", "info"),
    "duplicate-alternatives": ("fault", "fault", "supported", "info"),
    "empty-choices": ("fault", "fault", "fault", "info"),
    "null-choices": ("fault", "fault", "fault", "info"),
    "embedded-error": ("fault", "fault", "fault", "fault"),
}
#: Measured separately below.
SEPARATE = {"ok", "crash", "slow-drip", "slow-drip-error", "huge-body"}


def test_every_fault_of_the_server_has_an_expected_harness_outcome() -> None:
    assert set(EXPECTED) | SEPARATE == set(FAULTS)


def _run(faults: FaultServer, tmp_path: Path, base_url: str, probe_ids: list[str]) -> list[tuple[str, str]]:
    preset = get_preset("llamacpp").with_overrides(base_url=base_url, model="fault-model")
    report = record(
        Target(preset, "fault", "fault-model", "test"),
        [CATALOGUE.get(i) for i in probe_ids],
        catalogue=CATALOGUE,
        layout=Layout.out(tmp_path),
        api_key=None,
        timeout=TIMEOUT,
    )
    return [(r.outcome, r.verdict) for r in report.recording.probes]


#: The runner's deadline cuts every surface's request in the same place, before any body is read as a
#: surface reads it: each fault that waits out the timeout meets two of the probes, and every probe
#: meets a hang and a drip. The others meet all four (their bodies are read as each surface reads them).
TIMED = {
    "hang-no-bytes": ("chat-logprobs", "messages-plain"),
    "hang-after-headers": ("responses-logprobs", "decisions-choice-strings"),
    "slow-drip": ("chat-logprobs", "decisions-choice-strings"),
    "slow-drip-error": ("responses-logprobs", "messages-plain"),
}


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_the_harness_records_each_fault_as_an_outcome_and_the_run_goes_on(
    faults: FaultServer, tmp_path: Path, fault: str
) -> None:
    for probe_id, expected, healthy in zip(PROBES, EXPECTED[fault], NEXT, strict=True):
        if probe_id not in TIMED.get(fault, PROBES):
            continue
        # The faulted request first, then another probe against a healthy answer: the run goes on.
        started = time.monotonic()
        runs = _run(faults, tmp_path / probe_id, faults.base_url(fault, "ok"), [probe_id, healthy])
        elapsed = time.monotonic() - started
        (outcome, verdict), (after, _) = runs
        assert outcome == expected, f"{probe_id}: {verdict}"
        assert after == "supported", probe_id
        assert elapsed < 3 * TIMEOUT + 5, f"{probe_id} took {elapsed:.1f} s"


@pytest.mark.parametrize(
    ("probe_id", "arrived"), [("responses-logprobs", "output"), ("messages-plain", "content")]
)
def test_an_empty_answer_list_is_a_fault_naming_what_was_expected_and_what_arrived(
    faults: FaultServer, tmp_path: Path, probe_id: str, arrived: str
) -> None:
    ((outcome, verdict),) = _run(faults, tmp_path, faults.base_url("empty-choices"), [probe_id])
    assert outcome == "fault"
    assert f"expected an answer in {arrived} / actual {arrived}: []" in verdict


def test_a_faulted_run_is_written_aside_as_partial_and_the_fixture_folder_is_not_created(
    faults: FaultServer, tmp_path: Path
) -> None:
    _run(faults, tmp_path, faults.base_url("connection-reset", "ok"), list(PROBES))
    layout = Layout.out(tmp_path)
    assert not layout.fixture_dir("llamacpp-fault").exists()
    partial = Recording.load(layout.partial_dir("llamacpp-fault"))
    assert [r.outcome for r in partial.probes] == ["fault", "supported", "fault", "supported"]


@pytest.mark.parametrize(
    ("drip", "probe_id"), [(d, p) for d in ("slow-drip", "slow-drip-error") for p in TIMED[d]]
)
def test_a_slow_drip_is_cut_off_at_the_harness_timeout_and_the_run_goes_on(
    faults: FaultServer, tmp_path: Path, probe_id: str, drip: str
) -> None:
    # The drip's body takes 6 s; httpx's timeout bounds each read, the runner's deadline the whole answer.
    started = time.monotonic()
    healthy = NEXT[PROBES.index(probe_id)]
    runs = _run(faults, tmp_path, faults.base_url(drip, "ok"), [probe_id, healthy])
    assert time.monotonic() - started < TIMEOUT + 0.5
    (outcome, verdict), (after, _) = runs
    assert outcome == "timeout"
    assert verdict == f"no whole answer within {TIMEOUT} s: cut off at the deadline"
    assert after == "supported"


def test_a_50_mb_answer_is_recorded_as_a_fault_without_keeping_the_body(
    faults: FaultServer, tmp_path: Path
) -> None:
    started = time.monotonic()
    runs = _run(faults, tmp_path, faults.base_url("huge-body", "ok"), ["chat-logprobs", "messages-plain"])
    assert time.monotonic() - started < 10
    assert [outcome for outcome, _ in runs] == ["fault", "supported"]
    assert "<a body of 52428800 bytes" in runs[0][1]
    written = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    assert written < 1024 * 1024


def _committed_copy(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(COMMITTED.fixture_dir(KEY), Layout.out(out).fixture_dir(KEY))
    return out


def _same_tree(left: Path, right: Path) -> bool:
    compared = filecmp.dircmp(left, right)
    if compared.left_only or compared.right_only or compared.diff_files or compared.funny_files:
        return False
    return all(_same_tree(left / sub, right / sub) for sub in compared.common_dirs)


def test_a_server_that_crashes_mid_run_leaves_the_committed_fixtures_untouched_and_exits_1(
    faults: FaultServer, tmp_path: Path
) -> None:
    # Its own server: the crash fault stops it for good.
    with FaultServer(model="smollm2") as dying:
        out = _committed_copy(tmp_path)
        base = dying.base_url("ok", "ok", "ok", "crash")
        only = [
            arg
            for probe_id in ("chat-logprobs*", "responses-logprobs*", "messages-*")
            for arg in ("--only", probe_id)
        ]
        argv = ["--server", "llamacpp", "--base-url", base, "--release", "b10434", "--out", str(out)]
        status = cli.main([*argv, "--timeout", str(TIMEOUT), *only])
        assert dying.crashed
    layout = Layout.out(out)
    assert status == cli.EXIT_INCOMPLETE
    assert _same_tree(COMMITTED.fixture_dir(KEY), layout.fixture_dir(KEY))
    partial = Recording.load(layout.partial_dir(KEY))
    outcomes = [r.outcome for r in partial.probes]
    assert outcomes[:3] == ["supported"] * 3
    assert outcomes[3] in UNANSWERED and set(outcomes[4:]) == {"not-run"}
    # The answered probes' cassettes are kept beside the fixtures, the rest are not invented.
    kept = sorted(p.stem for p in layout.partial_dir(KEY).glob("*.yaml"))
    assert kept == sorted(r.id for r in partial.probes if r.outcome not in UNANSWERED)


def test_a_server_that_is_not_there_exits_3_and_writes_nothing(tmp_path: Path) -> None:
    with FaultServer() as gone:
        base = gone.base_url()
    out = tmp_path / "out"
    status = cli.main(["--server", "llamacpp", "--base-url", base, "--release", "b1", "--out", str(out)])
    assert status == cli.EXIT_UNREACHABLE
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))


def test_a_run_whose_every_request_is_refused_busy_exits_1_with_every_probe_a_fault(
    faults_at_once: FaultServer, tmp_path: Path
) -> None:
    # Busy with Retry-After: 0 (the wait it asks for is not what this test proves).
    argv = [
        "--server",
        "llamacpp",
        "--base-url",
        faults_at_once.base_url("503-retry-after"),
        "--release",
        "b1",
    ]
    status = cli.main([*argv, "--out", str(tmp_path), "--timeout", str(TIMEOUT)])
    assert status == cli.EXIT_INCOMPLETE
    results = Recording.load(Layout.out(tmp_path).partial_dir("llamacpp-b1"))
    # Its own route is not a surface, so the server answers it plainly; GET /v1/models always answers.
    bad_route = {"chat-bad-path", "systemone-models"}
    assert {r.outcome for r in results.probes if r.id not in bad_route} == {"fault"}
    assert any(r.id.startswith("decisions-") for r in results.probes if r.id not in bad_route)
    assert len(results.probes) == len(CATALOGUE)


def test_every_probe_meets_a_hang_and_a_drip() -> None:
    hangs = {p for f in ("hang-no-bytes", "hang-after-headers") for p in TIMED[f]}
    drips = {p for f in ("slow-drip", "slow-drip-error") for p in TIMED[f]}
    assert hangs == drips == set(PROBES)
