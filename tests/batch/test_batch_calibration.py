"""``calibration=`` on the batch core and ``--calibration FILE`` on its command line, against the fault
server: the answers are the calibrated client's, a calibration for another model is refused before any
request, the classifier still pickles, and a resume is held to the calibration it began with."""

from __future__ import annotations

import dataclasses
import json
import pickle
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _batch_data import QUESTIONS
from openai import OpenAI

from jevper import CalibrationMismatchError, SystemOneClient
from jevper.batch import BatchClassifier, Server
from jevper.batch.cli import main
from jevper.calibration import Binding, Calibration, Calibrator, QuestionCalibration, prompt_digest
from jevper.testing.faults import FaultServer

BOUND = Binding("faults", "test", "fault-model", "native", "systemone", prompt_digest(QUESTIONS))
CALIBRATION = Calibration(
    BOUND,
    {
        "topic": QuestionCalibration(
            "choice", ("billing", "other"), Calibrator("prior", prior=(0.8, 0.2)), {}
        ),
        "anger": QuestionCalibration("score", ("0", "1", "2"), Calibrator("temperature", 0.5), {}),
    },
    folds=5,
    seed=0,
).with_layouts(QUESTIONS)


def states(n: int) -> pa.RecordBatch:
    return pa.record_batch({"id": list(range(n)), "state": [f"ticket {i}: charged twice" for i in range(n)]})


def test_the_batch_answers_are_the_calibrated_clients_and_the_classifier_pickles(
    faults: FaultServer, tmp_path: Path
) -> None:
    path = tmp_path / "calibration.json"
    CALIBRATION.save(path)
    classifier = BatchClassifier(
        QUESTIONS, [Server(faults.base_url(), "fault-model")], api="systemone", calibration=path
    )
    copy = pickle.loads(pickle.dumps(classifier))
    try:
        out = copy.classify_sync(states(3)).to_pylist()
    finally:
        copy.close()
    sdk = OpenAI(base_url=faults.base_url(), api_key="none")
    client = SystemOneClient(sdk, model="fault-model", api="systemone", calibration=CALIBRATION)
    expected = client.system_one(state="ticket 0: charged twice", questions=QUESTIONS).to_api()["answers"]
    for row in out:
        assert dict(row["topic"]["probabilities"]) == pytest.approx(expected["topic"]["probabilities"])
        assert row["topic"]["choice"] == expected["topic"]["choice"] == "other"
        assert dict(row["anger"]["probabilities"]) == pytest.approx(expected["anger"]["probabilities"])
        assert row["urgent"]["noul"] == pytest.approx(0.7)  # no map for it: as the server said


def test_a_calibration_for_another_model_is_refused_when_the_classifier_is_made(faults: FaultServer) -> None:
    other = dataclasses.replace(CALIBRATION, bound_to=dataclasses.replace(BOUND, model="qwen"))
    with pytest.raises(CalibrationMismatchError) as refused:
        BatchClassifier(
            QUESTIONS, [Server(faults.base_url(), "fault-model")], api="systemone", calibration=other
        )
    assert (refused.value.field, refused.value.expected, refused.value.got) == (
        "model",
        "qwen",
        "fault-model",
    )


def write_rows(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": i, "state": f"ticket {i}"}) + "\n" for i in range(n)))
    return path


def run(tmp_path: Path, faults: FaultServer, *more: str, server: str | None = None) -> int:
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))
    rows = tmp_path / "in.jsonl"
    if not rows.exists():  # a resume is held to the input's time
        write_rows(rows, 6)
    argv = [str(rows), str(tmp_path / "out.parquet"), "--questions", str(questions), "--base-url",
            server or faults.base_url(), "--model", "fault-model", "--api", "systemone", *more]  # fmt: skip
    return main(argv)


def test_the_command_line_calibrates_every_row_and_says_with_what(
    faults: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "calibration.json"
    CALIBRATION.save(path)
    assert run(tmp_path, faults, "--calibration", str(path)) == 0
    said = capsys.readouterr().err
    assert f"calibrating with {path} (topic prior, anger temperature)" in said
    assert "kind and release not checked (given by URL)" in said
    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert {row["topic"]["choice"] for row in table} == {"other"}


def test_the_command_line_refuses_a_calibration_for_another_model_with_status_2(
    faults: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "calibration.json"
    dataclasses.replace(CALIBRATION, bound_to=dataclasses.replace(BOUND, model="qwen")).save(path)
    assert run(tmp_path, faults, "--calibration", str(path)) == 2
    assert "model 'qwen', got 'fault-model'" in capsys.readouterr().err
    assert not (tmp_path / "out.parquet").exists()


def test_a_resume_with_another_calibration_or_none_is_refused_and_goes_on_with_the_same(
    faults: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    path, other = tmp_path / "calibration.json", tmp_path / "other.json"
    CALIBRATION.save(path)
    dataclasses.replace(CALIBRATION, folds=3).save(other)
    at_once = ("--patience", "0", "--cool-down", "0.01")  # a run that fails on the gone server at once
    assert run(tmp_path, faults, "--calibration", str(path), *at_once, server=gone) == 3
    capsys.readouterr()
    for given in (["--calibration", str(other)], []):
        assert run(tmp_path, faults, *given, "--resume") == 2
        said = capsys.readouterr().err
        assert f"with calibration '{CALIBRATION.digest()}', this one asks " in said, said
    assert run(tmp_path, faults, "--calibration", str(path), "--resume") == 0
    assert {row["topic"]["choice"] for row in pq.read_table(tmp_path / "out.parquet").to_pylist()} == {
        "other"
    }


def test_an_engine_runs_manifest_names_the_calibrations_digest_so_its_resume_is_held_to_it() -> None:
    from jevper.batch._engine_cli import manifest

    servers = [Server("http://127.0.0.1:9/v1", "fault-model")]
    given = manifest(Path("in.jsonl"), BatchClassifier(QUESTIONS, servers, calibration=CALIBRATION))
    assert given["calibration"] == CALIBRATION.digest()
    assert "calibration" not in manifest(Path("in.jsonl"), BatchClassifier(QUESTIONS, servers))
    # The digest is the file's content, not where it was loaded from.
    assert dataclasses.replace(CALIBRATION, source="elsewhere.json").digest() == CALIBRATION.digest()
    assert dataclasses.replace(CALIBRATION, folds=3).digest() != CALIBRATION.digest()
