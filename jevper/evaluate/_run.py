"""An evaluation from files: the labelled table, the questions file and the batch's answers (and, for
the position bias, the same rows answered with each choice's options rotated)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jevper.batch.cli import questions_of
from jevper.evaluate._errors import LabelError
from jevper.evaluate._evaluation import DEFAULT_TARGET, Evaluation, evaluate
from jevper.evaluate._labels import chosen_by_row, paired, read_table
from jevper.evaluate._position import Asked, PositionBias, position_bias
from jevper.evaluate._select import DEFAULT_FOLDS, DEFAULT_SEED
from jevper.questions import Choice, Question, as_question


def read_questions(path: Path) -> tuple[dict[str, Any], dict[str, Question]]:
    """The questions file as given (for the prompt digest) and as questions, checked as the batch does."""
    asked = questions_of(path)
    return asked, {str(qid): as_question(str(qid), q) for qid, q in asked.items()}


def evaluate_files(
    labelled: Path,
    questions: Path,
    answers: Path,
    *,
    id_column: str = "id",
    rotated: Sequence[tuple[Path, Path]] = (),
    fit: bool = False,
    folds: int = DEFAULT_FOLDS,
    seed: int = DEFAULT_SEED,
    target: float = DEFAULT_TARGET,
) -> Evaluation:
    """``labelled`` against ``answers`` (a batch output asked with ``questions``); ``rotated``: pairs of a
    questions file with a choice's options in another order and the batch output asked with it."""
    _, asked = read_questions(questions)
    labels = read_table(labelled, id_column, "LABELLED")
    answered = read_table(answers, id_column, "ANSWERS")
    pairs = paired(labels, answered, asked)
    positions = _positions(asked, answered, rotated, id_column) if rotated else {}
    return evaluate(pairs, fit=fit, folds=folds, seed=seed, target=target, positions=positions)


def _positions(
    asked: Mapping[str, Question], answers: Any, rotated: Sequence[tuple[Path, Path]], id_column: str
) -> dict[str, PositionBias]:
    choices = {qid: q for qid, q in asked.items() if isinstance(q, Choice)}
    rows: dict[str, dict[str, list[Asked]]] = {
        qid: {rid: [a] for rid, a in chosen_by_row(answers, qid, q).items()} for qid, q in choices.items()
    }
    for questions_path, answers_path in rotated:
        _, other = read_questions(questions_path)
        table = read_table(answers_path, id_column, "--rotated ANSWERS")
        for qid, question in choices.items():
            turned = other.get(qid)
            if not isinstance(turned, Choice) or set(turned.options) != set(question.options):
                raise LabelError(
                    f"--rotated {questions_path}: expected question {qid!r} with the options "
                    f"{sorted(question.options)} in another order, got "
                    f"{sorted(turned.options) if isinstance(turned, Choice) else turned!r}"
                )
            for rid, a in chosen_by_row(table, qid, turned).items():
                if rid in rows[qid]:
                    rows[qid][rid].append(a)
    found = {qid: position_bias(by_row) for qid, by_row in rows.items()}
    return {qid: bias for qid, bias in found.items() if bias is not None}
