"""Batch outputs for the labelled tickets without a server: answers drawn from a seeded, overconfident
model, written by the batch's own writer in each of its formats."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path
from typing import Any

import pyarrow as pa

from jevper.batch._files import Writer, format_of
from jevper.batch._schema import Row, result_columns, result_fields
from jevper.questions import as_question

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "labelled"
TICKETS = HERE / "tickets.csv"
QUESTIONS = HERE / "tickets.questions.json"


def questions() -> dict[str, Any]:
    value: dict[str, Any] = json.loads(QUESTIONS.read_text())
    return value


def labelled() -> list[dict[str, str]]:
    with TICKETS.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    e = [math.exp(x - top) for x in logits]
    return [x / sum(e) for x in e]


def answers(rows: list[dict[str, str]], seed: int = 0, asked: dict[str, Any] | None = None) -> list[Row]:
    """Right about two times in three, and surer than that; the option shown first favoured. Each row's
    noise is its own (seeded by its id) and stays with each option whatever order ``asked`` shows them in."""
    asked = asked or questions()
    teams = list(asked["team"]["criteria"])
    out = []
    for row in rows:
        rng = random.Random(f"{seed}:{row['id']}")
        noise = {t: rng.gauss(0, 1.5) for t in sorted(teams)}
        team = [
            noise[t] + (3.0 if t == row["team"] else 0.0) + (1.0 if i == 0 else 0.0)
            for i, t in enumerate(teams)
        ]
        team_p = _softmax([x * 3.0 for x in team])
        team_p = [round(p, 6) for p in team_p]
        angry = rng.gauss(2.0 if row["angry"] == "true" else -2.0, 1.8) * 3.0
        level = int(row["urgency"])
        urgency_p = _softmax([-abs(i - level) * 2.5 + rng.gauss(0, 1.2) for i in range(4)])
        choice = teams[max(range(len(teams)), key=lambda i: team_p[i])]
        out.append(
            Row(
                answers={
                    "team": {
                        "type": "choice",
                        "choice": choice,
                        "probabilities": dict(zip(teams, team_p, strict=True)),
                        "confidence": 0.5,
                    },
                    "angry": {"type": "noul", "noul": 1 / (1 + math.exp(-angry))},
                    "urgency": {
                        "type": "score",
                        "score": sum(i * p for i, p in enumerate(urgency_p)),
                        "legend": {str(i): str(i) for i in range(4)},
                        "probabilities": {str(i): p for i, p in enumerate(urgency_p)},
                        "confidence": 0.5,
                    },
                },
                input_tokens=10,
                output_tokens=3,
            )
        )
    return out


def write(path: Path, ids: list[str], rows: list[Row], asked: dict[str, Any] | None = None) -> Path:
    """``rows`` as the batch writes its OUTPUT to ``path`` (its format by suffix)."""
    checked = [(qid, as_question(qid, q)) for qid, q in (asked or questions()).items()]
    schema = pa.schema([pa.field("id", pa.string()), *result_fields(checked)])
    batch = pa.RecordBatch.from_arrays([pa.array(ids), *result_columns(checked, rows)], schema=schema)
    writer = Writer(path, schema, format_of(path, "OUTPUT"))
    writer.write(batch)
    writer.close()
    return path
