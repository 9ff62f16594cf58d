"""An evaluation from files: the labelled table, the questions file and the batch's answers (and, for
the position bias, the same rows answered with each choice's options rotated)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jevper import ConfigError
from jevper.batch.cli import questions_of
from jevper.evaluate._errors import LabelError
from jevper.evaluate._evaluation import DEFAULT_TARGET, Evaluation, evaluate
from jevper.evaluate._labels import Table, distributions_by_row, paired, read_table
from jevper.evaluate._metrics import Distribution
from jevper.evaluate._position import PositionBias, chosen, position_bias
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
    content_free: Mapping[str, Distribution] | None = None,
    risk: float | None = None,
    per_label: bool = False,
) -> Evaluation:
    """``labelled`` against ``answers`` (a batch output asked with ``questions``); ``rotated``: pairs of a
    questions file with a choice's options in another order and the batch output asked with it;
    ``content_free``: per question, the model's mean answer to content-free states; ``risk`` and
    ``per_label``: the guaranteed thresholds for ``target`` (``evaluate``)."""
    _, asked = read_questions(questions)
    labels = read_table(labelled, id_column, "LABELLED")
    answered = read_table(answers, id_column, "ANSWERS")
    pairs = paired(labels, answered, asked)
    positions = _positions(asked, answered, rotated, id_column) if rotated else {}
    return evaluate(
        pairs,
        fit=fit,
        folds=folds,
        seed=seed,
        target=target,
        positions=positions,
        content_free=content_free,
        risk=risk,
        per_label=per_label,
    )


def check_rotated(
    asked: Mapping[str, Question], rotated: Sequence[Path] = (), *, rotations: bool = False
) -> dict[Path, dict[str, Choice]]:
    """Before anything is asked: a choice to rotate (with ``rotations``), and each ``--rotated`` questions
    file's choices, by question; a choice with other options than asked is refused (one a file leaves
    out was not asked in that order: a rotation leaves out the choices narrower than it)."""
    choices = {qid: q for qid, q in asked.items() if isinstance(q, Choice)}
    if rotations and not choices:
        raise ConfigError(f"--rotations: expected a choice question to rotate, got none among {list(asked)}")
    found: dict[Path, dict[str, Choice]] = {}
    for path in rotated:
        _, other = read_questions(path)
        found[path] = {}
        for qid, question in choices.items():
            turned = other.get(qid)
            if turned is None:
                continue
            if not isinstance(turned, Choice) or set(turned.options) != set(question.options):
                raise LabelError(
                    f"--rotated {path}: expected question {qid!r} with the options "
                    f"{sorted(question.options)} in another order, got "
                    f"{sorted(turned.options) if isinstance(turned, Choice) else turned!r}"
                )
            found[path][qid] = turned
        if not found[path]:
            raise LabelError(
                f"--rotated {path}: expected one of the choice questions {list(choices)} in another order, "
                f"got none among {list(other)}"
            )
    return found


def _positions(
    asked: Mapping[str, Question], answers: Table, rotated: Sequence[tuple[Path, Path]], id_column: str
) -> dict[str, PositionBias]:
    choices = {qid: q for qid, q in asked.items() if isinstance(q, Choice)}
    # Per question, each order it was asked in and the rows' distributions in that order.
    runs: dict[str, list[tuple[tuple[str, ...], dict[str, Distribution]]]] = {
        qid: [(q.options, distributions_by_row(answers, qid, q))] for qid, q in choices.items()
    }
    turned = check_rotated(asked, [questions for questions, _ in rotated])
    for questions_path, answers_path in rotated:
        table = read_table(answers_path, id_column, "--rotated ANSWERS")
        for qid, question in turned[questions_path].items():
            runs[qid].append((question.options, distributions_by_row(table, qid, question)))
    found: dict[str, PositionBias] = {}
    for qid, orders in runs.items():
        raw, corrected = (_bias(orders, corrected=c) for c in (False, True))
        if raw is not None:
            found[qid] = dataclasses.replace(raw, prior_corrected=corrected)
    return found


def _bias(
    orders: Sequence[tuple[tuple[str, ...], dict[str, Distribution]]], *, corrected: bool
) -> PositionBias | None:
    """The position bias over the orders; the first order's rows are the rows compared."""
    answered = [chosen(order, by_row, corrected=corrected) for order, by_row in orders]
    rows = {rid: [first] + [a[rid] for a in answered[1:] if rid in a] for rid, first in answered[0].items()}
    return position_bias(rows)
