"""The labelled rows and the batch's answers to them, paired per question.

Both tables are read by the batch's own file reading (Parquet, CSV, JSON Lines). The labelled table has
an id column and a gold column named after each question id: an option for a Choice, true or false for a
Noul, a level (its index, or its text) for a Score; an empty cell leaves that row unlabelled for that
question. The answers are a batch output in any of its formats: a struct per question (Parquet, JSON
Lines) or its flattened ``question.field`` columns (CSV). A yes/no question's options here are
``("true", "false")``, a score's its level indices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jevper import JevperError
from jevper._distribution import renormalised
from jevper.batch._answers import NOUL_OPTIONS, probabilities_of
from jevper.batch._files import Input
from jevper.evaluate._errors import LabelError
from jevper.evaluate._metrics import Distribution
from jevper.questions import Noul, Question, Score, described

_READ_ROWS = 4096


def options_of(question: Question) -> tuple[str, ...]:
    return NOUL_OPTIONS if isinstance(question, Noul) else question.options


@dataclass(frozen=True)
class Labelled:
    """One question's labelled, answered rows: ids, distributions (in ``options`` order), gold indices;
    and the labelled rows left out because their answer failed, and the rows with no gold."""

    qid: str
    type: str
    options: tuple[str, ...]
    ids: tuple[str, ...]
    probabilities: tuple[Distribution, ...]
    gold: tuple[int, ...]
    unanswered: int = 0
    unlabelled: int = 0


@dataclass(frozen=True)
class Table:
    """A table read whole: its file, its columns, and its rows by id (as text)."""

    path: Path
    role: str
    columns: tuple[str, ...]
    rows: dict[str, dict[str, Any]]


def read_table(path: Path, id_column: str, role: str) -> Table:
    """The rows of ``path`` by id, read as the batch reads its input (every id present and unique)."""
    try:
        source = Input(path)
        checked = source.check(id_column)
        rows: dict[str, dict[str, Any]] = {}
        for batch in source.batches(_READ_ROWS):
            for row in batch.to_pylist():
                rows[str(row[id_column])] = row
    except JevperError as exc:  # the batch's reader refuses with its own errors
        said = str(exc).removeprefix(f"INPUT {path}: ")
        raise LabelError(f"{role} {path}: {said}") from None
    return Table(path, role, tuple(checked.schema.names), rows)


def gold_of(question: Question, value: Any) -> int | None:
    """The gold option's index, None for an empty cell; a value that names no option is refused."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    options = options_of(question)
    if isinstance(question, Noul):
        said = str(value).strip().lower() if not isinstance(value, bool) else str(value).lower()
        if said in NOUL_OPTIONS:
            return NOUL_OPTIONS.index(said)
        raise ValueError(f"expected true or false, got {value!r}")
    if isinstance(question, Score):
        if isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer():
            value = str(int(value))
        said = str(value).strip()
        if said in options:
            return options.index(said)
        levels = [described(level) for level in question.criteria]
        if said in levels:
            return levels.index(said)
        raise ValueError(f"expected a level index 0 to {len(options) - 1} or a level's text, got {value!r}")
    said = str(value).strip()
    if said in options:
        return options.index(said)
    raise ValueError(f"expected one of the options {list(options)}, got {value!r}")


def check_gold_columns(labels: Table, questions: Mapping[str, Question]) -> None:
    missing = [qid for qid in questions if qid not in labels.columns]
    if missing:
        raise LabelError(
            f"{labels.role} {labels.path}: expected a gold column named after each question id "
            f"{list(questions)}, got columns {list(labels.columns)}; missing {missing}"
        )


def check_answer_columns(answers: Table, questions: Mapping[str, Question]) -> None:
    missing = [
        qid
        for qid in questions
        if qid not in answers.columns
        and f"{qid}.probabilities" not in answers.columns
        and f"{qid}.noul" not in answers.columns
    ]
    if missing:
        raise LabelError(
            f"{answers.role} {answers.path}: expected the batch's answer column for each question "
            f"(named after its id; '<id>.probabilities' or '<id>.noul' in a CSV), got columns "
            f"{list(answers.columns)}; missing {missing}: were these answers asked with these questions?"
        )


def answer_of(row: Mapping[str, Any], qid: str, question: Question) -> Distribution | None:
    """The row's distribution over the question's options, None when the row has no answer to it; a
    cell that is no distribution is a ValueError (``jevper.batch._answers``, the review's reader too)."""
    given = probabilities_of(row, qid)
    if given is None:
        return None
    options = options_of(question)
    strays = sorted(set(given) - set(options))
    if strays:
        raise ValueError(
            f"expected probabilities over the options {list(options)}, got {strays}; were these answers "
            "asked with these questions?"
        )
    return renormalised([given.get(option, 0.0) for option in options])


def golds(labels: Table, questions: Mapping[str, Question]) -> dict[str, dict[str, int | None]]:
    """Each question's gold option index by row id (None: unlabelled); every gold value checked."""
    check_gold_columns(labels, questions)
    found: dict[str, dict[str, int | None]] = {}
    for qid, question in questions.items():
        found[qid] = {}
        for rid, row in labels.rows.items():
            try:
                found[qid][rid] = gold_of(question, row.get(qid))
            except ValueError as exc:
                raise LabelError(f"{labels.role} {labels.path}, row {rid!r}, column {qid!r}: {exc}") from None
    return found


def paired(labels: Table, answers: Table, questions: Mapping[str, Question]) -> dict[str, Labelled]:
    """Each question's labelled rows with their answers; every labelled id must have an answer row."""
    gold_by_row = golds(labels, questions)
    check_answer_columns(answers, questions)
    absent = [rid for rid in labels.rows if rid not in answers.rows]
    if absent:
        raise LabelError(
            f"{answers.role} {answers.path}: expected a row for every id of {labels.role} {labels.path}, "
            f"got none for {len(absent)} of its {len(labels.rows)} ids, e.g. {absent[:5]}; were these "
            "answers made from this table?"
        )
    found: dict[str, Labelled] = {}
    for qid, question in questions.items():
        ids: list[str] = []
        probabilities: list[Distribution] = []
        gold: list[int] = []
        unanswered = unlabelled = 0
        for rid, index in gold_by_row[qid].items():
            if index is None:
                unlabelled += 1
                continue
            try:
                p = answer_of(answers.rows[rid], qid, question)
            except ValueError as exc:
                raise LabelError(
                    f"{answers.role} {answers.path}, row {rid!r}, question {qid!r}: {exc}"
                ) from None
            if p is None:
                unanswered += 1
                continue
            ids.append(rid)
            probabilities.append(p)
            gold.append(index)
        found[qid] = Labelled(
            qid,
            question.type,
            options_of(question),
            tuple(ids),
            tuple(probabilities),
            tuple(gold),
            unanswered,
            unlabelled,
        )
    return found


def distributions_by_row(answers: Table, qid: str, question: Question) -> dict[str, Distribution]:
    """Each answered row's distribution over the question's options (in their order)."""
    found: dict[str, Distribution] = {}
    for rid, row in answers.rows.items():
        try:
            p = answer_of(row, qid, question)
        except ValueError as exc:
            raise LabelError(f"{answers.role} {answers.path}, row {rid!r}, question {qid!r}: {exc}") from None
        if p is not None:
            found[rid] = p
    return found
