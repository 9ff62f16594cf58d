"""The review file: the output's rows whose confidence is below a threshold, beside the output
(``<stem>.review.<ext>``), in its format.

A row's confidence is the lowest top probability over its questions (a yes/no answer's larger side): a
row goes to review when any one of its answers is unsure. The top probability, not the System One
``confidence``, is what a calibration makes mean "right this often". A row that failed has no answer to
be unsure of; its error column already says so, and it is not in the review. The file is made from the
finished output, so a resumed run (or another engine) gets the same review as one run straight through.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from jevper import ConfigError
from jevper._atomic import replacing
from jevper.batch._files import Input, Writer, format_of

_READ_ROWS = 4096


def review_path(output: Path) -> Path:
    """``<stem>.review.<ext>`` beside ``output``."""
    return output.with_name(f"{output.stem}.review{output.suffix}")


def checked_threshold(value: float) -> float:
    if not 0 < value <= 1:
        raise ConfigError(f"--review-below: expected a probability in (0, 1], got {value:g}")
    return value


def row_confidence(row: Mapping[str, Any], qids: Sequence[str]) -> float | None:
    """The lowest top probability over the row's answers; None for a row without answers."""
    tops = [top for top in (_top(row, qid) for qid in qids) if top is not None]
    return min(tops) if tops else None


def _top(row: Mapping[str, Any], qid: str) -> float | None:
    """The answer's top probability, as any output format holds it: a struct (Parquet, JSON Lines) or its
    flattened ``qid.field`` columns (CSV, every cell text)."""
    cell = row.get(qid)
    if isinstance(cell, Mapping):
        probabilities, noul = cell.get("probabilities"), cell.get("noul")
    else:
        probabilities, noul = row.get(f"{qid}.probabilities"), row.get(f"{qid}.noul")
    if noul not in (None, ""):
        yes = float(noul)
        return max(yes, 1.0 - yes)
    if probabilities in (None, ""):
        return None
    if isinstance(probabilities, str):
        probabilities = json.loads(probabilities)
    if isinstance(probabilities, list):  # Arrow's map: (key, value) pairs
        probabilities = dict(probabilities)
    values = [float(v) for v in probabilities.values() if v is not None]
    total = sum(values)
    return max(values) / total if total > 0 else None


def write_review(output: Path, qids: Sequence[str], below: float) -> tuple[Path, int]:
    """The rows of the finished ``output`` whose confidence is below ``below``, written whole (a
    temporary file, then one rename) to ``review_path(output)``; the path and how many rows."""
    source = Input(output)
    schema = source.schema()
    path = review_path(output)
    count = 0
    with replacing(path) as temporary:
        writer = Writer(temporary, schema, format_of(output, "OUTPUT"))
        try:
            for batch in source.batches(_READ_ROWS):
                confidences = [row_confidence(row, qids) for row in batch.to_pylist()]
                unsure = pa.array([c is not None and c < below for c in confidences])
                kept = batch.filter(unsure)
                if kept.num_rows:
                    writer.write(kept)
                    count += kept.num_rows
        finally:
            writer.close()
    return path, count
