"""The review file: the output's rows whose top probability is below a threshold, beside the output
(``<stem>.review.<ext>``), in its format.

A row's top probability is the lowest over its questions (a yes/no answer's larger side): a row goes to
review when any one of its answers is unsure. The top probability, not the System One ``confidence``
(which rescales it), is what a calibration makes mean "right this often". A row that failed has no answer to
be unsure of; its error column already says so, and it is not in the review. The file is made from the
finished output, so a resumed run (or another engine) gets the same review as one run straight through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from jevper import ConfigError
from jevper._atomic import replacing
from jevper._distribution import renormalised, top_probability
from jevper.batch._answers import probabilities_of
from jevper.batch._files import Input, Writer, format_of

_READ_ROWS = 4096


def review_path(output: Path) -> Path:
    """``<stem>.review.<ext>`` beside ``output``."""
    return output.with_name(f"{output.stem}.review{output.suffix}")


def checked_threshold(value: float) -> float:
    if not 0 < value <= 1:
        raise ConfigError(f"--review-below: expected a probability in (0, 1], got {value:g}")
    return value


def row_top_probability(row: Mapping[str, Any], qids: Sequence[str]) -> float | None:
    """The lowest top probability over the row's answers; None for a row without answers. An answer
    that is no distribution is a ValueError (``_answers.probabilities_of``)."""
    tops = []
    for qid in qids:
        given = probabilities_of(row, qid)
        if given is not None:
            tops.append(top_probability(renormalised(list(given.values()))))
    return min(tops) if tops else None


def _top_probability(output: Path, at: int, row: Mapping[str, Any], qids: Sequence[str]) -> float | None:
    try:
        return row_top_probability(row, qids)
    except ValueError as exc:
        raise ConfigError(
            f"--review-below: OUTPUT {output}, row {at + 1}: {exc}; the batch writes distributions only: "
            "was the output edited?"
        ) from None


def write_review(output: Path, qids: Sequence[str], below: float) -> tuple[Path, int]:
    """The rows of the finished ``output`` whose top probability is below ``below``, written whole (a
    temporary file, then one rename) to ``review_path(output)``; the path and how many rows."""
    source = Input(output)
    schema = source.schema()
    path = review_path(output)
    count = read = 0
    with replacing(path) as temporary:
        writer = Writer(temporary, schema, format_of(output, "OUTPUT"))
        try:
            for batch in source.batches(_READ_ROWS):
                rows = batch.to_pylist()
                tops = [_top_probability(output, read + i, row, qids) for i, row in enumerate(rows)]
                read += len(rows)
                unsure = pa.array([top is not None and top < below for top in tops])
                kept = batch.filter(unsure)
                if kept.num_rows:
                    writer.write(kept)
                    count += kept.num_rows
        finally:
            writer.close()
    return path, count
