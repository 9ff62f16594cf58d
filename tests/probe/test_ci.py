"""The probe in CI, offline: the gate on a baseline (record and replay), grades, the JUnit and JSON
files read by a JUnit reader and a JSON Schema validator from the registry, and probes of one's own.

Live runs go through `jevper.testing.faults` on loopback; the committed llama.cpp b11549 recording
(recorded live, see its provenance.json) stands in for a baseline where a test needs real answers.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from junitparser import Error, Failure, JUnitXml, Skipped

from jevper.probe import cli
from jevper.probe.catalogue import CatalogueError, load_catalogue
from jevper.probe.compose import requests_for
from jevper.probe.presets import get_preset
from jevper.probe.recording import Layout, Recording
from jevper.probe.summary import SCHEMA, SCHEMA_FILE, schema_text
from jevper.testing.faults import FaultServer, running

ROOT = Path(__file__).resolve().parents[2]
KEY = "llamacpp-b1"
#: Deterministic probes on three surfaces and the System One route, in catalogue order.
ONLY = ("chat-bad-model", "chat-n-two", "chat-unknown-field", "responses-bad-model", "systemone-route")


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with running(model="smollm2") as started:
        yield started


def record_args(out: Path, base_url: str, *extra: str, only: tuple[str, ...] = ONLY) -> list[str]:
    argv = ["--server", "llamacpp", "--base-url", base_url, "--release", "b1", "--model", "smollm2"]
    argv += ["--out", str(out), "--timeout", "5", *extra]
    return [*argv, *(arg for probe_id in only for arg in ("--only", probe_id))]


def record(out: Path, base_url: str, *extra: str, only: tuple[str, ...] = ONLY) -> int:
    return cli.main(record_args(out, base_url, *extra, only=only))


def one_fault_at(probe_id: str, fault: str, only: tuple[str, ...] = ONLY) -> tuple[str, ...]:
    """A rotation of faults that serves `fault` on the probe's own request and a healthy answer on
    every other POST of the selection (primers included)."""
    catalogue, preset = load_catalogue(), get_preset("llamacpp")
    rotation: list[str] = []
    for probe in catalogue.select(list(only)):
        sent = requests_for(probe, catalogue, preset)
        rotation += ["ok"] * (len(sent) - 1) + [fault if probe.id == probe_id else "ok"]
    return tuple(rotation)


def validate(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    return data


def cases(path: Path) -> dict[str, Any]:
    """JUnit test cases by name, read by junitparser."""
    document = JUnitXml.fromfile(str(path))
    return {case.name: (suite, case) for suite in document for case in suite}


# --- the gate --------------------------------------------------------------------------------------


def test_a_run_whose_one_answer_changed_exits_1_and_names_exactly_that_probe(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert record(tmp_path / "base", server.base_url()) == cli.EXIT_OK
    capsys.readouterr()
    baseline = str(tmp_path / "base" / "fixtures" / KEY)

    changed = server.base_url(*one_fault_at("chat-unknown-field", "html-404"))
    status = record(tmp_path / "new", changed, "--baseline", baseline, "--json", str(tmp_path / "s.json"))

    assert status == 1
    said = capsys.readouterr()
    assert f"baseline {KEY} -> {KEY}: tripped: chat-unknown-field; 1 changed" in said.err
    assert "| [chat-unknown-field](#chat-unknown-field) |" in said.out  # the change report, printed
    assert said.out.count("](#") == 1
    data = validate(tmp_path / "s.json")
    assert data["baseline"]["counted"] == ["chat-unknown-field"]
    assert [p["id"] for p in data["probes"] if p["change"] != "same"] == ["chat-unknown-field"]
    assert data["exit_status"] == 1
    assert (tmp_path / "new" / "reports" / "baseline-changes.md").is_file()


def test_the_same_run_again_passes_the_gate(tmp_path: Path, server: FaultServer) -> None:
    assert record(tmp_path / "base", server.base_url()) == cli.EXIT_OK
    baseline = str(tmp_path / "base" / "fixtures" / KEY)
    assert record(tmp_path / "new", server.base_url(), "--baseline", baseline) == cli.EXIT_OK


def test_replay_with_a_baseline_gates_offline_on_the_recordings_alone(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert record(tmp_path / "base", server.base_url()) == cli.EXIT_OK
    assert record(tmp_path / "new", server.base_url(*one_fault_at("chat-n-two", "html-404"))) == cli.EXIT_OK
    server.stop()  # offline from here on
    capsys.readouterr()
    baseline = str(tmp_path / "base" / "fixtures" / KEY)

    replayed = cli.main(["replay", "--out", str(tmp_path / "new"), "--baseline", baseline])

    assert replayed == 1
    assert "tripped: chat-n-two; 1 changed" in capsys.readouterr().err
    assert cli.main(["replay", "--out", str(tmp_path / "base"), "--baseline", baseline]) == 0


def test_probes_in_one_recording_only_are_listed_and_counted_only_when_asked(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert record(tmp_path / "base", server.base_url(), only=ONLY[:3]) == cli.EXIT_OK
    baseline = str(tmp_path / "base" / "fixtures" / KEY)
    capsys.readouterr()

    assert record(tmp_path / "new", server.base_url(), "--baseline", baseline, only=ONLY[1:]) == cli.EXIT_OK
    err = capsys.readouterr().err
    assert "2 not in the baseline (responses-bad-model, systemone-route, not counted)" in err
    assert "1 only in the baseline (chat-bad-model, not counted)" in err

    counted = record(
        tmp_path / "again", server.base_url(), "--baseline", baseline, "--count-missing", only=ONLY[1:]
    )
    assert counted == 1


def near_tied(folder: Path, probe_id: str) -> None:
    """Swap the label C among the first token's alternatives for a non-label token of the same
    logprob: what a near-tie at the edge of top_logprobs does from one run to the next."""
    path = folder / f"{probe_id}.yaml"
    cassette = yaml.safe_load(path.read_text(encoding="utf-8"))
    response = cassette["interactions"][-1]["response"]["body"]
    body = json.loads(response["string"])
    alternatives = body["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    entry = next(a for a in alternatives if a["token"] == "C")
    entry["token"] = "Sure"
    response["string"] = json.dumps(body, indent=2)
    path.write_text(yaml.safe_dump(cassette, sort_keys=False), encoding="utf-8")


def test_a_label_swapped_out_among_near_tied_alternatives_never_trips_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    committed = Layout.repository()
    key = "llamacpp-b11549"
    out = tmp_path / "out"
    shutil.copytree(committed.fixture_dir(key), out / "fixtures" / key)
    near_tied(out / "fixtures" / key, "chat-logprobs")
    capsys.readouterr()

    baseline = str(committed.fixture_dir(key))
    status = cli.main(
        ["replay", "--out", str(out), "--baseline", baseline, "--json", str(tmp_path / "s.json")]
    )

    assert status == 0, capsys.readouterr().err
    replayed = Recording.load(out / "fixtures" / key).result("chat-logprobs")
    assert (
        replayed is not None and replayed.verdict == "20 alternatives (asked for 20); labels A, B among them"
    )
    data = validate(tmp_path / "s.json")
    noise = [p for p in data["probes"] if p["change"] == "noise"]
    assert [p["id"] for p in noise] == ["chat-logprobs"]
    assert data["baseline"]["tripped"] is False


def test_fewer_alternatives_is_a_change_even_with_the_same_outcome(tmp_path: Path) -> None:
    committed = Layout.repository()
    key = "llamacpp-b11549"
    out = tmp_path / "out"
    shutil.copytree(committed.fixture_dir(key), out / "fixtures" / key)
    path = out / "fixtures" / key / "chat-logprobs.yaml"
    cassette = yaml.safe_load(path.read_text(encoding="utf-8"))
    response = cassette["interactions"][-1]["response"]["body"]
    body = json.loads(response["string"])
    first = body["choices"][0]["logprobs"]["content"][0]
    first["top_logprobs"] = first["top_logprobs"][:19]
    response["string"] = json.dumps(body)
    path.write_text(yaml.safe_dump(cassette, sort_keys=False), encoding="utf-8")

    assert cli.main(["replay", "--out", str(out), "--baseline", str(committed.fixture_dir(key))]) == 1


# --- grades ----------------------------------------------------------------------------------------


def test_a_system_one_200_that_breaks_the_api_is_a_failure_and_exits_1_unless_no_fail(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = server.base_url(*one_fault_at("systemone-route", "positive-logprob"))
    junit = tmp_path / "junit.xml"

    assert record(tmp_path / "a", broken, "--junit", str(junit)) == 1
    assert "breaks the API's specification: systemone-route" in capsys.readouterr().err
    assert record(tmp_path / "b", broken, "--no-fail") == 0

    index = Recording.load(tmp_path / "a" / "fixtures" / KEY)
    graded = {p.id: p.grade for p in index.probes}
    assert graded == {probe_id: None for probe_id in ONLY} | {"systemone-route": "fail"}
    _, case = cases(junit)["systemone-route"]
    assert [type(r) for r in case.result] == [Failure]
    assert "breaks the API's specification" in case.result[0].message
    matrix = (tmp_path / "a" / "reports" / "capabilities.md").read_text(encoding="utf-8")
    assert "**fails the API**: 200, but not the API's answer" in matrix
    page = (tmp_path / "a" / "reports" / "index.html").read_text(encoding="utf-8")
    assert 'data-probe="systemone-route" data-kind="fails"' in page


def test_a_conforming_system_one_answer_is_graded_pass_and_other_verdicts_stay_descriptive(
    tmp_path: Path, server: FaultServer
) -> None:
    assert record(tmp_path, server.base_url()) == 0
    graded = {p.id: p.grade for p in Recording.load(tmp_path / "fixtures" / KEY).probes}
    assert graded == {probe_id: None for probe_id in ONLY} | {"systemone-route": "pass"}


# --- the formats -----------------------------------------------------------------------------------


def test_the_junit_file_has_one_case_per_probe_grouped_by_topic_and_marks_the_changed_one(
    tmp_path: Path, server: FaultServer
) -> None:
    assert record(tmp_path / "base", server.base_url()) == 0
    baseline = str(tmp_path / "base" / "fixtures" / KEY)
    junit = tmp_path / "junit.xml"
    changed = server.base_url(*one_fault_at("responses-bad-model", "html-404"))

    assert record(tmp_path / "new", changed, "--baseline", baseline, "--junit", str(junit)) == 1

    found = cases(junit)
    assert sorted(found) == sorted(ONLY)
    topics = {probe.id: probe.topic for probe in load_catalogue().probes}
    for name, (suite, case) in found.items():
        assert case.classname == f"jevper.probe.{KEY}.{topics[name]}"
        assert suite.name == load_catalogue().topic(topics[name]).title
    failing = {name for name, (_, case) in found.items() if case.result}
    assert failing == {"responses-bad-model"}
    failure = found["responses-bad-model"][1].result[0]
    assert isinstance(failure, Failure)
    assert "verdict changed against the baseline (outcome ignored -> refused)" in failure.message
    assert f"new/fixtures/{KEY}/responses-bad-model.yaml" in failure.message
    assert "evidence: <!DOCTYPE html>" in failure.message
    document = JUnitXml.fromfile(str(junit))
    assert (document.tests, document.failures, document.errors) == (len(ONLY), 1, 0)


def test_a_probe_only_the_baseline_holds_is_a_skipped_case_and_an_unanswered_one_an_error(
    tmp_path: Path, server: FaultServer
) -> None:
    assert record(tmp_path / "base", server.base_url(), only=ONLY[:2]) == 0
    baseline = str(tmp_path / "base" / "fixtures" / KEY)
    junit = tmp_path / "junit.xml"
    hung = server.base_url("hang-no-bytes")
    status = record(
        tmp_path / "new",
        hung,
        "--baseline",
        baseline,
        "--junit",
        str(junit),
        "--timeout",
        "1",
        only=ONLY[1:2],
    )
    assert status == 1
    found = cases(junit)
    assert [type(r) for r in found["chat-n-two"][1].result] == [Error]
    assert [type(r) for r in found["chat-bad-model"][1].result] == [Skipped]


def test_the_json_summary_validates_against_its_schema_with_every_field_a_ci_job_reads(
    tmp_path: Path, server: FaultServer
) -> None:
    assert record(tmp_path, server.base_url(), "--json", str(tmp_path / "s.json")) == 0
    data = validate(tmp_path / "s.json")
    assert (data["format"], data["version"]) == ("jevper-probe-summary", 1)
    assert data["server"] == {
        "kind": "llamacpp",
        "name": "llama.cpp",
        "release": "b1",
        "model": "smollm2",
        "model_name": "smollm2",
        "key": KEY,
        "recorded_on": data["server"]["recorded_on"],
    }
    assert [p["id"] for p in data["probes"]] == list(ONLY)
    route = next(p for p in data["probes"] if p["id"] == "systemone-route")
    assert (route["outcome"], route["status"], route["grade"], route["baseline"]) == (
        "supported",
        200,
        "pass",
        None,
    )
    assert route["cassette"].endswith(f"fixtures/{KEY}/systemone-route.yaml")
    # The schema refuses what version 1 does not say.
    data["probes"][0]["colour"] = "red"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, SCHEMA)


def test_the_committed_schema_is_what_the_code_generates() -> None:
    committed = ROOT / "docs" / "schemas" / SCHEMA_FILE
    assert committed.read_text(encoding="utf-8") == schema_text(), "run `python -m jevper.probe report`"


# --- probes of one's own ---------------------------------------------------------------------------

OWN = """\
# A team's own probes, in the catalogue's format.
surface = "chat_completions"
path = "/chat/completions"

[[topic]]
id = "ours"
title = "Our server's promises"

[[probe]]
id = "ours-stop-sequence"
topic = "ours"
asks = "stop: [\\"B\\"] with the standard question"
decides = "accepted and ignored, or refused"
classifier = "accepted_or_refused"
compare = "status-class"
deterministic = true
body = { stop = ["B"], max_tokens = 4 }

[[probe]]
id = "ours-logprobs-3"
topic = "logprobs"
asks = "top_logprobs: 3"
decides = "alternatives count"
classifier = "answer_alternatives"
compare = "alternatives"
deterministic = true
body = { logprobs = true, top_logprobs = 3, max_tokens = 4 }
"""


@pytest.fixture
def own(tmp_path: Path) -> Path:
    folder = tmp_path / "probes"
    folder.mkdir()
    (folder / "ours.toml").write_text(OWN, encoding="utf-8")
    return folder


def test_probes_of_ones_own_are_recorded_reported_and_replayed_offline(
    tmp_path: Path, own: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    ids = ("chat-bad-model", "ours-stop-sequence", "ours-logprobs-3")
    assert (
        record(out, server.base_url(), "--catalogue", str(own), "--json", str(tmp_path / "s.json"), only=ids)
        == 0
    )

    index = Recording.load(out / "fixtures" / KEY)
    assert [p.id for p in index.probes] == list(ids)
    assert (out / "fixtures" / KEY / "ours-stop-sequence.yaml").is_file()
    matrix = (out / "reports" / "capabilities.md").read_text(encoding="utf-8")
    ours = matrix[matrix.index("## Our server's promises") :]
    assert "`ours-stop-sequence`" in ours
    logprobs = matrix[matrix.index("## Logprobs and top_logprobs") : matrix.index("## Thinking")]
    assert "`ours-logprobs-3`" in logprobs and "3 alternatives (asked for 3)" in logprobs
    page = (out / "reports" / "index.html").read_text(encoding="utf-8")
    assert f'data-key="{KEY}" data-probe="ours-stop-sequence"' in page
    summary = validate(tmp_path / "s.json")
    assert [p["user_defined"] for p in summary["probes"]] == [False, True, True]

    server.stop()
    capsys.readouterr()
    assert cli.main(["replay", "--out", str(out), "--catalogue", str(own)]) == 0
    assert "3 verdicts identical to the recorded index" in capsys.readouterr().out
    # Without the file that defines them, the report says what it needs.
    assert cli.main(["report", "--out", str(out)]) == cli.EXIT_USAGE
    assert "pass the file that defines it with --catalogue" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "line", "words"),
    [
        (('classifier = "accepted_or_refused"', 'classifier = "telepathy"'), 14, "classifier must name one"),
        (('topic = "logprobs"', 'topic = "gossip"'), 21, "topic 'gossip' is not one of"),
        (('compare = "alternatives"', 'colour = "red"'), 25, "unknown keys ['colour']"),
        (
            ('id = "ours-logprobs-3"', 'id = "chat-logprobs"'),
            20,
            "probe id 'chat-logprobs' is taken by a built-in",
        ),
        (
            ("deterministic = true\nbody = { stop", 'deterministic = "yes"\nbody = { stop'),
            16,
            "expected deterministic",
        ),
        (
            ('[[probe]]\nid = "ours-logprobs-3"', '[[probe]]\nid = "ours-logprobs-3'),
            20,
            "expected valid TOML",
        ),
    ],
)
def test_a_malformed_probe_of_ones_own_is_refused_naming_its_file_and_line(
    own: Path, capsys: pytest.CaptureFixture[str], change: tuple[str, str], line: int, words: str
) -> None:
    path = own / "ours.toml"
    text = path.read_text(encoding="utf-8")
    assert change[0] in text
    path.write_text(text.replace(change[0], change[1], 1), encoding="utf-8")

    with pytest.raises(CatalogueError, match=re.escape(words)) as refused:
        load_catalogue([own])
    assert str(refused.value).startswith(f"{path}:{line}: ")
    assert cli.main(["list", "--catalogue", str(path)]) == cli.EXIT_USAGE
    assert f"{path}:{line}: " in capsys.readouterr().err


def test_a_catalogue_path_that_does_not_exist_is_refused_by_naming_it(tmp_path: Path) -> None:
    with pytest.raises(CatalogueError, match="it does not exist"):
        load_catalogue([tmp_path / "nowhere.toml"])


def test_list_shows_the_probes_of_ones_own_after_the_built_in_ones(
    own: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["list", "--catalogue", str(own)]) == 0
    ids = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
    assert ids[-2:] == ["ours-stop-sequence", "ours-logprobs-3"]
    assert len(ids) == len(load_catalogue()) + 2


def test_a_record_run_whose_reader_has_gone_goes_on_writes_its_recording_and_exits_by_it(
    tmp_path: Path, server: FaultServer
) -> None:
    # `python -m jevper.probe ... | head -2`: the pipe has no reader after two lines. The run once ended
    # at its next progress line, wrote nothing and exited 0.
    run = subprocess.Popen(
        [sys.executable, "-m", "jevper.probe", *record_args(tmp_path, server.base_url())],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert run.stdout is not None
    run.stdout.close()
    _, err = run.communicate(timeout=120)
    assert run.returncode == cli.EXIT_OK, err.decode()
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
    recorded = Recording.load(tmp_path / "fixtures" / KEY)
    assert [r.id for r in recorded.probes] == list(ONLY)
    assert all(recorded.has_cassette(probe_id) for probe_id in ONLY)
