"""--fit binds a calibration to what the answers record having answered them (the batch's provenance): the
model, method and surface need no flag, a flag that agrees is taken, one that contradicts them is refused
naming both; answers asked by the evaluation itself (--base-url, --spawn) are bound the same way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _answers import QUESTIONS, TICKETS

from jevper.batch.cli import main as batch
from jevper.calibration import Calibration, prompt_digest
from jevper.evaluate.cli import main
from jevper.testing.faults import FaultServer, running

SERVER = ["--server", "llamacpp", "--release", "b11549"]


@pytest.fixture(scope="module")
def faults() -> Iterator[FaultServer]:
    with running() as server:
        yield server


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 60 labelled tickets (enough for five folds, and quick to ask)."""
    path = tmp_path_factory.mktemp("tickets") / "tickets.csv"
    path.write_text("".join(TICKETS.read_text(encoding="utf-8").splitlines(keepends=True)[:61]))
    return path


def batch_answers(faults: FaultServer, tickets: Path, tmp_path: Path, name: str = "answers.parquet") -> Path:
    """The tickets asked by the batch the default way (no --method, no --api)."""
    output = tmp_path / name
    asked = [str(tickets), str(output), "--questions", str(QUESTIONS), "--no-progress"]
    assert batch([*asked, "--base-url", f"{faults.base_url()}={faults.model}"]) == 0
    return output


def bound(out: Path) -> dict[str, object]:
    return dict(json.loads((out / "calibration.json").read_text())["bound_to"])


@pytest.mark.parametrize("name", ["answers.parquet", "answers.csv"])
def test_fit_on_the_batchs_answers_binds_the_model_method_and_surface_they_record(
    faults: FaultServer, tickets: Path, tmp_path: Path, name: str
) -> None:
    answers = batch_answers(faults, tickets, tmp_path, name)
    out = tmp_path / "eval"
    common = [str(tickets), "--questions", str(QUESTIONS), "--answers", str(answers), "--out", str(out)]
    assert main([*common, "--fit", *SERVER]) == 0
    assert bound(out) == {
        "server_kind": "llamacpp",
        "server_release": "b11549",
        "model": faults.model,
        # The fault server's model is asked on Responses by api "auto", and read by grammar.
        "method": "grammar",
        "surface": "responses",
        "prompt_digest": prompt_digest(json.loads(QUESTIONS.read_text())),
        "option_orders": 1,
    }
    # Flags that agree with the record are taken; "auto" is what the answers record.
    again = tmp_path / "again"
    agreeing = ["--model", faults.model, "--method", "grammar", "--api", "auto"]
    assert main([*common[:-1], str(again), "--fit", *SERVER, *agreeing]) == 0
    assert bound(again) == bound(out)


def test_a_binding_that_contradicts_what_the_answers_record_is_refused_naming_both(
    faults: FaultServer, tickets: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = batch_answers(faults, tickets, tmp_path)
    common = [
        str(tickets),
        "--questions",
        str(QUESTIONS),
        "--answers",
        str(answers),
        "--out",
        str(tmp_path / "e"),
    ]
    # docs/calibration.md's flow: answers read by grammar, bound by the page's --fit to logprobs.
    capsys.readouterr()
    assert main([*common, "--fit", *SERVER, "--method", "logprobs", "--api", "chat_completions"]) == 2
    said = capsys.readouterr().err
    assert "--method logprobs" in said and "'grammar'" in said
    assert not (tmp_path / "e" / "calibration.json").exists()
    assert main([*common, "--fit", *SERVER, "--model", "another-model"]) == 2
    said = capsys.readouterr().err
    assert "--model another-model" in said and repr(faults.model) in said


def test_fit_asking_a_server_itself_binds_what_answered_without_method_or_api(
    faults: FaultServer, tickets: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "asked"
    asking = [
        str(tickets),
        "--questions",
        str(QUESTIONS),
        "--base-url",
        f"{faults.base_url()}={faults.model}",
    ]
    assert main([*asking, "--out", str(out), "--fit", *SERVER]) == 0
    assert (bound(out)["method"], bound(out)["surface"]) == ("grammar", "responses")
    Calibration.load(out / "calibration.json")
    # What asking cannot tell (a server by URL states neither kind nor release) is refused first.
    sent = len(faults.log)
    capsys.readouterr()
    assert main([*asking, "--out", str(tmp_path / "no"), "--fit"]) == 2
    said = capsys.readouterr().err
    assert "missing ['--server', '--release']" in said and "--method" not in said.split("missing")[1][:40]
    assert "auto is taken as what the answers record" in said
    assert len(faults.log) == sent


def test_fit_on_answers_a_calibration_was_applied_to_is_refused(
    faults: FaultServer, tickets: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "first"
    asking = [
        str(tickets),
        "--questions",
        str(QUESTIONS),
        "--base-url",
        f"{faults.base_url()}={faults.model}",
    ]
    assert main([*asking, "--out", str(first), "--fit", *SERVER]) == 0
    calibrated = tmp_path / "calibrated.parquet"
    asked = [str(tickets), str(calibrated), "--questions", str(QUESTIONS), "--no-progress"]
    calibration = ["--calibration", str(first / "calibration.json")]
    assert batch([*asked, "--base-url", f"{faults.base_url()}={faults.model}", *calibration]) == 0
    capsys.readouterr()
    common = [
        str(tickets),
        "--questions",
        str(QUESTIONS),
        "--answers",
        str(calibrated),
        "--out",
        str(tmp_path / "e"),
    ]
    assert main([*common, "--fit", *SERVER]) == 2
    assert "record a calibration applied to them" in capsys.readouterr().err
