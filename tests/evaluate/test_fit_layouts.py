"""The calibration `--fit` writes carries each question's own layout, so a client asking some of the
questions, or others besides, can check the ones it calibrates."""

from __future__ import annotations

from pathlib import Path

from _answers import QUESTIONS, TICKETS, answers, labelled, questions, write

from jevper.calibration import Calibration, prompt_digest
from jevper.evaluate.cli import main


def test_fit_writes_each_questions_own_layout_digest_beside_the_whole_one(tmp_path: Path) -> None:
    # The first 60 tickets: the digests do not depend on how many rows were fit, and five folds of 60
    # cost a quarter of the 240's (tests/evaluate/test_evaluate_cli.py fits the whole table).
    rows = labelled()[:60]
    tickets = tmp_path / "tickets.csv"
    tickets.write_text("".join(TICKETS.read_text(encoding="utf-8").splitlines(keepends=True)[:61]))
    table = write(tmp_path / "answers.csv", [r["id"] for r in rows], answers(rows))
    out = tmp_path / "out"
    bound = ["--server", "llamacpp", "--release", "b11549", "--model", "m", "--method", "grammar",
             "--api", "chat_completions"]  # fmt: skip
    argv = [str(tickets), "--questions", str(QUESTIONS), "--answers", str(table), "--out", str(out), "--fit"]
    assert main([*argv, *bound]) == 0
    calibration = Calibration.load(out / "calibration.json")
    given = questions()
    assert calibration.bound_to.prompt_digest == prompt_digest(given)
    assert {qid: q.prompt_digest for qid, q in calibration.questions.items()} == {
        qid: prompt_digest({qid: given[qid]}) for qid in given
    }
