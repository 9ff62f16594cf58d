"""The output's columns: the id, the kept input columns, one struct per question, ``error``, ``usage``,
and with escalation ``escalation``.

A question's struct is its System One answer (``ChoiceAnswer.to_api()`` and its siblings), with
``probabilities`` and ``legend`` as maps; a row that failed has null there and its ``error`` set. With
escalation, the question's column holds the answer given (the second server's where it answered) and
``escalation`` holds, per question, its route (``jevper._escalate.Routed``): who answered, the first
answer's top probability and the threshold, both answers, and the second server's failure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jevper.questions import Choice, Noul, Question, Score

ERROR_COLUMN = "error"
USAGE_COLUMN = "usage"
RESERVED = (ERROR_COLUMN, USAGE_COLUMN)
#: The column of each question's route, in an output whose run escalated.
ESCALATION_COLUMN = "escalation"

_PROBABILITIES = pa.map_(pa.string(), pa.float64())
ANSWER_TYPES: dict[type, pa.StructType] = {
    Choice: pa.struct(
        [
            ("type", pa.string()),
            ("choice", pa.string()),
            ("probabilities", _PROBABILITIES),
            ("confidence", pa.float64()),
        ]
    ),
    Noul: pa.struct([("type", pa.string()), ("noul", pa.float64())]),
    Score: pa.struct(
        [
            ("type", pa.string()),
            ("score", pa.float64()),
            ("legend", pa.map_(pa.string(), pa.string())),
            ("probabilities", _PROBABILITIES),
            ("confidence", pa.float64()),
        ]
    ),
}
ERROR_TYPE = pa.struct([("type", pa.string()), ("message", pa.string())])
USAGE_TYPE = pa.struct([("input_tokens", pa.int64()), ("output_tokens", pa.int64())])


@dataclass(frozen=True)
class Row:
    """One row's outcome: its answers in the API's shape and its tokens, or its error."""

    answers: Mapping[str, Mapping[str, Any]] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: tuple[str, str] | None = None  # (the jevper error's type, its message)
    #: the error was the servers' (none answered in time), not the row's own: worth asking again later
    server_failed: bool = False
    #: with escalation: each question's route (``jevper._escalate.Routed.to_dict()``)
    escalation: Mapping[str, Mapping[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        value = {
            "answers": self.answers,
            "usage": [self.input_tokens, self.output_tokens],
            "error": list(self.error) if self.error else None,
        }
        return value if self.escalation is None else {**value, "escalation": self.escalation}

    @classmethod
    def of_json(cls, value: Mapping[str, Any]) -> Row:
        usage = value.get("usage") or [None, None]
        error = value.get("error")
        errors = (error[0], error[1]) if error else None
        return cls(value.get("answers"), usage[0], usage[1], errors, escalation=value.get("escalation"))


def answer_fields(questions: Sequence[tuple[str, Question]]) -> list[pa.Field]:
    return [pa.field(qid, ANSWER_TYPES[type(q)]) for qid, q in questions]


def route_type(question: Question) -> pa.StructType:
    """One question's route in the ``escalation`` column: who answered and why, and both answers."""
    answer = ANSWER_TYPES[type(question)]
    return pa.struct(
        [
            ("answered_by", pa.string()),
            ("escalated", pa.bool_()),
            ("confidence", pa.float64()),
            ("below", pa.float64()),
            ("first", answer),
            ("second", answer),
            ("failure", ERROR_TYPE),
        ]
    )


def escalation_type(questions: Sequence[tuple[str, Question]]) -> pa.StructType:
    return pa.struct([(qid, route_type(q)) for qid, q in questions])


def result_fields(questions: Sequence[tuple[str, Question]], escalating: bool = False) -> list[pa.Field]:
    """The columns every output has after the id and the kept columns (and ``escalation`` when the run
    escalates)."""
    return [
        *answer_fields(questions),
        pa.field(ERROR_COLUMN, ERROR_TYPE),
        pa.field(USAGE_COLUMN, USAGE_TYPE),
        *([pa.field(ESCALATION_COLUMN, escalation_type(questions))] if escalating else []),
    ]


def result_columns(
    questions: Sequence[tuple[str, Question]], rows: Sequence[Row], escalating: bool = False
) -> list[pa.Array]:
    """The answer, error and usage columns of ``rows`` (and their routes), in ``result_fields`` order."""
    columns: list[pa.Array] = []
    for qid, question in questions:
        values = [_cell(row.answers.get(qid)) if row.answers else None for row in rows]
        columns.append(pa.array(values, type=ANSWER_TYPES[type(question)]))
    errors = [{"type": r.error[0], "message": r.error[1]} if r.error else None for r in rows]
    columns.append(pa.array(errors, type=ERROR_TYPE))
    usage = [
        None
        if r.error and r.input_tokens is None
        else {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens}
        for r in rows
    ]
    columns.append(pa.array(usage, type=USAGE_TYPE))
    if escalating:
        routes = [_routes(questions, row.escalation) for row in rows]
        columns.append(pa.array(routes, type=escalation_type(questions)))
    return columns


def _routes(
    questions: Sequence[tuple[str, Question]], routes: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, Any] | None:
    if routes is None:
        return None
    return {
        qid: None
        if qid not in routes
        else {**routes[qid], "first": _cell(routes[qid]["first"]), "second": _cell(routes[qid]["second"])}
        for qid, _ in questions
    }


def _cell(answer: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if answer is None:
        return None
    legend = answer.get("legend")
    if legend is None:
        return answer
    # A level may be a JSON object or array as the question gave it: kept as JSON text.
    shown = {k: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for k, v in legend.items()}
    return {**answer, "legend": shown}


def flattened(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch for CSV: every struct field its own ``column.field`` column, maps as JSON objects."""
    names: list[str] = []
    columns: list[pa.Array] = []
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if pa.types.is_struct(column.type):
            # flatten() nulls each field where its struct is null (field() alone does not).
            for sub, child in zip(column.type, column.flatten(), strict=True):
                names.append(f"{name}.{sub.name}")
                columns.append(_plain(child))
        else:
            names.append(name)
            columns.append(_plain(column))
    return pa.RecordBatch.from_arrays(columns, names=names)


def _plain(column: pa.Array) -> pa.Array:
    kind = column.type
    if pa.types.is_map(kind) or pa.types.is_struct(kind) or pa.types.is_list(kind):
        values = [None if v is None else _as_json(v, kind) for v in column.to_pylist()]
        return pa.array(
            [None if v is None else json.dumps(v, ensure_ascii=False) for v in values], type=pa.string()
        )
    return column


def _as_json(value: Any, kind: pa.DataType) -> Any:
    """A value as JSON holds it: every map an object, at any depth (Arrow gives a map as its pairs)."""
    if value is None:
        return None
    if pa.types.is_map(kind):
        return {k: _as_json(v, kind.item_type) for k, v in value}
    if pa.types.is_struct(kind):
        return {f.name: _as_json(value.get(f.name), f.type) for f in kind}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_as_json(v, kind.value_type) for v in value]
    return value
