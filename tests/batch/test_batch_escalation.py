"""``escalate=`` on the batch core and ``--escalate-to URL=MODEL --escalate-below P`` on its command line,
against two scripted System One servers that answer differently: the unsure questions (only they) are
asked again of the second server, the output keeps both answers and the route in its ``escalation``
column, a second server that fails leaves the first answers with the failure noted, ``auto`` reads the
calibration's thresholds, and a bad flag is refused with exit 2 naming what was expected."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jevper import ConfigError, Escalation
from jevper._distribution import choice_confidence
from jevper.batch import BatchClassifier, Server
from jevper.batch._schema import Row
from jevper.batch.cli import main
from jevper.calibration import Binding, Calibration, Calibrator, QuestionCalibration, Threshold, prompt_digest
from jevper.testing.faults import FaultServer, running
from jevper.testing.script import Script

QUESTIONS: dict[str, Any] = {
    "topic": {"type": "choice", "criteria": {"billing": "a charge", "other": "anything else"}},
    "urgent": {"type": "noul", "instructions": "Does the writer need an answer today?"},
}


def body(model: str, topic: dict[str, float] | None = None, urgent: float | None = None) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    if topic is not None:
        best = max(topic, key=lambda option: topic[option])
        answers["topic"] = {
            "type": "choice",
            "choice": best,
            "probabilities": topic,
            "confidence": choice_confidence(list(topic.values())),
        }
    if urgent is not None:
        answers["urgent"] = {"type": "noul", "noul": urgent}
    return {"model": model, "answers": answers, "usage": {"input_tokens": 10, "output_tokens": 1}}


@pytest.fixture
def servers() -> Iterator[tuple[Script, Script, FaultServer, FaultServer]]:
    first, second = Script(), Script()
    with running(script=first, model="small") as a, running(script=second, model="large") as b:
        yield first, second, a, b


def queue(script: Script, n: int, reply: dict[str, Any], status: int = 200) -> None:
    for _ in range(n):
        script.reply("/systemone", status, reply)


def rows(n: int) -> pa.RecordBatch:
    return pa.record_batch({"id": list(range(n)), "state": [f"ticket {i}: charged twice" for i in range(n)]})


def classifier(a: FaultServer, b: FaultServer, below: float | str, **settings: Any) -> BatchClassifier:
    return BatchClassifier(
        QUESTIONS,
        [Server(a.base_url(), "small", slots=2)],
        api="systemone",
        escalate=Escalation(
            Server(b.base_url(), "large", slots=2), below, settings.pop("escalate_calibration", None)
        ),
        **settings,
    )


def test_the_output_keeps_both_answers_and_the_route_of_each_escalated_question(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    queue(first, 3, body("small", {"billing": 0.6, "other": 0.4}, urgent=0.95))
    queue(second, 3, body("large", {"billing": 0.1, "other": 0.9}))
    batch = pickle.loads(pickle.dumps(classifier(a, b, 0.8)))
    try:
        out = batch.classify_sync(rows(3))
    finally:
        batch.close()
    assert out.schema.names == ["id", "topic", "urgent", "error", "usage", "escalation"]
    for row in out.to_pylist():
        assert row["error"] is None
        assert row["topic"]["choice"] == "other"  # the second server's answer is the one given
        route = row["escalation"]["topic"]
        assert (route["answered_by"], route["escalated"], route["below"]) == ("second", True, 0.8)
        assert route["confidence"] == pytest.approx(0.6)
        assert route["first"]["choice"] == "billing"
        assert dict(route["first"]["probabilities"]) == pytest.approx({"billing": 0.6, "other": 0.4})
        assert route["second"]["choice"] == "other"
        assert route["failure"] is None
        kept = row["escalation"]["urgent"]
        assert (kept["answered_by"], kept["escalated"], kept["second"]) == ("first", False, None)
        assert row["usage"] == {"input_tokens": 20, "output_tokens": 2}
    # Only the unsure question went to the second server.
    assert all(list(asked["questions"]) == ["topic"] for asked in second.bodies("/systemone"))
    assert (batch.escalated, batch.escalation_failures) == (3, 0)
    assert (batch.requests_sent, batch.escalation_requests_sent) == (6, 3)


def test_answers_at_the_threshold_stay_with_the_first_server(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    queue(first, 2, body("small", {"billing": 0.6, "other": 0.4}, urgent=0.6))
    batch = classifier(a, b, 0.6)
    try:
        out = batch.classify_sync(rows(2)).to_pylist()
    finally:
        batch.close()
    assert [row["topic"]["choice"] for row in out] == ["billing", "billing"]
    assert {route["answered_by"] for row in out for route in row["escalation"].values()} == {"first"}
    assert second.requests == [] and batch.escalated == 0


def test_a_second_server_that_fails_leaves_the_first_answers_with_the_failure_noted(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    first, second, a, b = servers
    queue(first, 2, body("small", {"billing": 0.55, "other": 0.45}, urgent=0.9))
    queue(second, 2, {"detail": "model large is not loaded"}, status=400)
    batch = classifier(a, b, 0.8)
    try:
        out = batch.classify_sync(rows(2)).to_pylist()
    finally:
        batch.close()
    for row in out:
        assert row["error"] is None  # the row is answered: by the first server
        assert row["topic"]["choice"] == "billing"
        route = row["escalation"]["topic"]
        assert (route["answered_by"], route["escalated"], route["second"]) == ("first", True, None)
        assert route["failure"]["type"] == "ProviderError"
        assert "not loaded" in route["failure"]["message"]
    assert (batch.escalated, batch.escalation_failures) == (2, 2)


def thresholds(tmp_path: Path) -> Path:
    bound = Binding("faults", "test", "small", "native", "systemone", prompt_digest(QUESTIONS))
    topic = QuestionCalibration(
        "choice", ("billing", "other"), Calibrator("identity"), {}, threshold=Threshold(0.9, 0.1, 300, 0.7)
    )
    urgent = QuestionCalibration(
        "noul", ("true", "false"), Calibrator("identity"), {}, threshold=Threshold(0.9, 0.1, 300, 0.5)
    )
    path = tmp_path / "small.json"
    Calibration(bound, {"topic": topic, "urgent": urgent}, folds=5, seed=0).with_layouts(QUESTIONS).save(path)
    return path


def test_auto_holds_each_answer_to_the_calibrations_threshold(
    servers: tuple[Script, Script, FaultServer, FaultServer], tmp_path: Path
) -> None:
    first, second, a, b = servers
    queue(first, 1, body("small", {"billing": 0.65, "other": 0.35}, urgent=0.9))
    queue(second, 1, body("large", {"billing": 0.95, "other": 0.05}))
    batch = classifier(a, b, "auto", calibration=thresholds(tmp_path))
    try:
        (row,) = batch.classify_sync(rows(1)).to_pylist()
    finally:
        batch.close()
    assert (row["escalation"]["topic"]["answered_by"], row["escalation"]["topic"]["below"]) == ("second", 0.7)
    assert (row["escalation"]["urgent"]["answered_by"], row["escalation"]["urgent"]["below"]) == (
        "first",
        0.5,
    )


def test_auto_without_thresholds_is_refused_when_the_classifier_is_made(
    servers: tuple[Script, Script, FaultServer, FaultServer],
) -> None:
    _, _, a, b = servers
    with pytest.raises(ConfigError, match="expected a calibration"):
        classifier(a, b, "auto")


def test_the_second_servers_calibration_applies_to_its_answers(
    servers: tuple[Script, Script, FaultServer, FaultServer], tmp_path: Path
) -> None:
    first, second, a, b = servers
    bound = Binding("faults", "test", "large", "native", "systemone", prompt_digest(QUESTIONS))
    prior = QuestionCalibration("choice", ("billing", "other"), Calibrator("prior", prior=(0.25, 0.75)), {})
    path = tmp_path / "large.json"
    Calibration(bound, {"topic": prior}, folds=5, seed=0).with_layouts(QUESTIONS).save(path)
    queue(first, 1, body("small", {"billing": 0.6, "other": 0.4}, urgent=0.9))
    queue(second, 1, body("large", {"billing": 0.5, "other": 0.5}))
    batch = classifier(a, b, 0.8, escalate_calibration=path)
    try:
        (row,) = batch.classify_sync(rows(1)).to_pylist()
    finally:
        batch.close()
    assert dict(row["topic"]["probabilities"]) == pytest.approx({"billing": 0.75, "other": 0.25})
    assert dict(row["escalation"]["topic"]["first"]["probabilities"]) == pytest.approx(
        {"billing": 0.6, "other": 0.4}
    )


def test_a_journalled_row_keeps_its_routes() -> None:
    route = {"answered_by": "second", "escalated": True, "confidence": 0.6, "below": 0.8}
    row = Row({"topic": {"type": "choice"}}, 10, 1, escalation={"topic": route})
    assert Row.of_json(json.loads(json.dumps(row.to_json()))) == row


def write_rows(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": i, "state": f"ticket {i}"}) + "\n" for i in range(n)))
    return path


def test_the_command_line_escalates_and_says_how_many(
    servers: tuple[Script, Script, FaultServer, FaultServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, second, a, b = servers
    queue(first, 3, body("small", {"billing": 0.6, "other": 0.4}, urgent=0.99))
    queue(second, 3, body("large", {"billing": 0.2, "other": 0.8}))
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))
    output = tmp_path / "out.parquet"
    status = main(
        [
            str(write_rows(tmp_path / "in.jsonl", 3)),
            str(output),
            "--questions",
            str(questions),
            "--base-url",
            f"{a.base_url()}=small",
            "--api",
            "systemone",
            "--escalate-to",
            f"{b.base_url()}=large",
            "--escalate-below",
            "0.75",
        ]
    )
    assert status == 0
    table = pq.read_table(output).to_pylist()
    assert [row["escalation"]["topic"]["answered_by"] for row in table] == ["second"] * 3
    assert [row["topic"]["choice"] for row in table] == ["other"] * 3
    said = capsys.readouterr().out
    assert "3 questions asked again of large" in said
    assert "0 failed there" in said


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--escalate-to", "http://127.0.0.1:9/v1", "--escalate-below", "0.8"], "expected URL=MODEL"),
        (["--escalate-to", "qwen-1.5b", "--escalate-below", "0.8"], "expected URL=MODEL"),
        (
            ["--escalate-to", "http://127.0.0.1:9/v1=large", "--escalate-below", "1.5"],
            r"expected a top probability in (0, 1] or auto",
        ),
        (["--escalate-to", "http://127.0.0.1:9/v1=large"], "--escalate-below P: expected with --escalate-to"),
        (["--escalate-below", "0.8"], "--escalate-to URL=MODEL: expected with --escalate-below"),
    ],
)
def test_a_bad_escalation_flag_is_refused_with_exit_2_naming_what_was_expected(
    flags: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))
    argv = [str(tmp_path / "in.jsonl"), str(tmp_path / "out.parquet"), "--questions", str(questions)]
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--base-url", "http://127.0.0.1:9/v1=small", *flags])
    assert refused.value.code == 2
    assert expected in capsys.readouterr().err


def test_escalate_below_auto_without_a_calibration_exits_2_before_any_request(
    servers: tuple[Script, Script, FaultServer, FaultServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, second, a, b = servers
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))
    status = main(
        [
            str(write_rows(tmp_path / "in.jsonl", 2)),
            str(tmp_path / "out.parquet"),
            "--questions",
            str(questions),
            "--base-url",
            f"{a.base_url()}=small",
            "--escalate-to",
            f"{b.base_url()}=large",
            "--escalate-below",
            "auto",
        ]
    )
    assert status == 2
    assert "expected a calibration" in capsys.readouterr().err
    assert first.requests == [] and second.requests == []


def test_with_the_cache_a_rerun_asks_neither_server_again(
    servers: tuple[Script, Script, FaultServer, FaultServer], tmp_path: Path
) -> None:
    first, second, a, b = servers
    queue(first, 2, body("small", {"billing": 0.6, "other": 0.4}, urgent=0.95))
    queue(second, 2, body("large", {"billing": 0.1, "other": 0.9}))
    cache = tmp_path / "answers.sqlite"
    outputs = []
    for _ in range(2):
        batch = classifier(a, b, 0.8, cache=cache)
        try:
            outputs.append(batch.classify_sync(rows(2)).to_pylist())
        finally:
            batch.close()
    assert (len(first.requests), len(second.requests)) == (2, 2)  # the second run sent nothing
    assert batch.requests_sent == 0 and batch.cache_hits == 2
    assert [row["topic"]["choice"] for row in outputs[1]] == ["other", "other"]
    assert [row["escalation"]["topic"]["answered_by"] for row in outputs[1]] == ["second", "second"]


def test_an_escalated_output_records_both_models_and_is_refused_by_fit(
    servers: tuple[Script, Script, FaultServer, FaultServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from jevper.batch._provenance import read_provenance
    from jevper.evaluate.cli import main as evaluate

    first, second, a, b = servers
    queue(first, 2, body("small", {"billing": 0.6, "other": 0.4}, urgent=0.99))
    queue(second, 2, body("large", {"billing": 0.2, "other": 0.8}))
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))
    output = tmp_path / "out.parquet"
    argv = [str(write_rows(tmp_path / "in.jsonl", 2)), str(output), "--questions", str(questions)]
    escalating = ["--escalate-to", f"{b.base_url()}=large", "--escalate-below", "0.75"]
    assert main([*argv, "--base-url", f"{a.base_url()}=small", "--api", "systemone", *escalating]) == 0
    recorded = read_provenance(output)
    assert recorded is not None
    assert (recorded["model"], recorded["models"]) == (None, ["large", "small"])
    assert recorded["escalation"] == {"model": "large", "below": 0.75, "calibration": None}
    labels = tmp_path / "labels.csv"
    labels.write_text("id,state,topic,urgent\n0,ticket 0,other,true\n1,ticket 1,other,true\n")
    capsys.readouterr()
    fitting = [
        str(labels),
        "--questions",
        str(questions),
        "--answers",
        str(output),
        "--out",
        str(tmp_path / "fit"),
    ]
    status = evaluate([*fitting, "--fit", "--server", "faults", "--release", "test"])
    # Half of these answers are the second model's: a calibration of the first fit on them would not apply.
    assert status == 2
    assert "an escalation" in capsys.readouterr().err
    assert not (tmp_path / "fit" / "calibration.json").exists()


def test_a_csv_output_holds_each_route_as_json_with_its_maps_as_objects(
    servers: tuple[Script, Script, FaultServer, FaultServer], tmp_path: Path
) -> None:
    import csv

    first, second, a, b = servers
    queue(first, 1, body("small", {"billing": 0.6, "other": 0.4}, urgent=0.99))
    queue(second, 1, body("large", {"billing": 0.2, "other": 0.8}))
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))
    output = tmp_path / "out.csv"
    argv = [str(write_rows(tmp_path / "in.jsonl", 1)), str(output), "--questions", str(questions)]
    escalating = ["--escalate-to", f"{b.base_url()}=large", "--escalate-below", "0.75"]
    assert main([*argv, "--base-url", f"{a.base_url()}=small", "--api", "systemone", *escalating]) == 0
    with output.open(newline="", encoding="utf-8") as f:
        (row,) = list(csv.DictReader(f))
    route = json.loads(row["escalation.topic"])
    assert route["first"]["probabilities"] == {"billing": 0.6, "other": 0.4}
    assert route["second"]["probabilities"] == {"billing": 0.2, "other": 0.8}
    assert json.loads(row["topic.probabilities"]) == {"billing": 0.2, "other": 0.8}
