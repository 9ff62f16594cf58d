"""evaluate() from distributions in hand: too few rows to fit, no rows at all, and strict JSON throughout."""

from __future__ import annotations

import json

from jevper.evaluate import Binding, Calibrator, Labelled, evaluate
from jevper.evaluate._report import html

OPTIONS = ("yes-ish", "no-ish")


def labelled(n: int) -> Labelled:
    rows = tuple((0.8, 0.2) if i % 2 else (0.3, 0.7) for i in range(n))
    return Labelled(
        "q", "choice", OPTIONS, tuple(str(i) for i in range(n)), rows, tuple(i % 3 % 2 for i in range(n))
    )


def test_a_question_with_too_few_rows_for_the_folds_is_not_fit_and_says_why() -> None:
    evaluation = evaluate({"q": labelled(7)}, fit=True, folds=5)
    figures = evaluation.to_json()["questions"]["q"]
    assert figures["calibration"] == {
        "not_fit": "expected at least 10 labelled, answered rows for 5 folds, got 7"
    }
    assert "after" not in figures
    bound = Binding("k", "r", "m", "logprobs", "chat_completions", "sha256:0")
    assert evaluation.calibration(bound).questions["q"].calibrator == Calibrator()


def test_a_question_without_answered_rows_gives_nulls_in_strict_json_and_a_page() -> None:
    figures = evaluate({"q": labelled(0)}, fit=True).to_json()
    text = json.dumps(figures, allow_nan=False)
    before = json.loads(text)["questions"]["q"]["before"]
    assert (before["n"], before["accuracy"], before["nll"], before["selective"]["reached"]) == (
        0,
        None,
        None,
        None,
    )
    assert '<svg class="reliability"' in html(figures)
