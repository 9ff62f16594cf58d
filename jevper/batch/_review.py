"""The review file: the output's rows whose top probability is below a threshold, beside the output
(``<stem>.review.<ext>``), in its format.

A row's top probability is the lowest over its questions (a yes/no answer's larger side): a row goes to
review when any one of its answers is unsure. The top probability, not the System One ``confidence``
(which rescales it), is what a calibration makes mean "right this often". A row that failed has no answer to
be unsure of; its error column already says so, and it is not in the review. The file is made from the
finished output, so a resumed run (or another engine) gets the same review as one run straight through.

``--review-below auto`` takes the thresholds from the run's ``--calibration`` (``python -m jevper.evaluate
... --fit --target-accuracy A --risk D``): each answer is held to its question's threshold, or its top
option's where the calibration has one per label (``jevper.calibration.threshold_for``); where no threshold
met the target, every answer of that question (or label) goes to review.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from jevper import ConfigError
from jevper._atomic import replacing
from jevper._distribution import renormalised, top_probability
from jevper.batch._answers import probabilities_of
from jevper.batch._files import Input, Writer, format_of
from jevper.calibration import Calibration, threshold_for

_READ_ROWS = 4096
AUTO = "auto"
#: What a review holds answers to: one threshold for every answer, or a calibration's per question and label.
Below = float | Calibration


def review_path(output: Path) -> Path:
    """``<stem>.review.<ext>`` beside ``output``."""
    return output.with_name(f"{output.stem}.review{output.suffix}")


def checked_threshold(value: float) -> float:
    if not 0 < value <= 1:
        raise ConfigError(f"--review-below: expected a probability in (0, 1], got {value:g}")
    return value


def review_below_argument(text: str) -> float | str:
    """``--review-below`` as argparse reads it: a number (checked by ``checked_threshold``) or auto."""
    if text == AUTO:
        return AUTO
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a probability in (0, 1] or {AUTO}, got {text!r}"
        ) from None


def review_below(given: float | str, calibration: Path | None, qids: Sequence[str]) -> Below:
    """What the review holds answers to: the number given, or with auto the calibration's thresholds, each
    question asked having one (refused before any request otherwise)."""
    if given != AUTO:
        return checked_threshold(float(given))
    if calibration is None:
        raise ConfigError(
            "--review-below auto: expected --calibration FILE, whose guaranteed thresholds it uses, got "
            "none; give one fit with python -m jevper.evaluate ... --fit --target-accuracy A --risk D, or a "
            "number"
        )
    found = Calibration.load(calibration)
    missing = [qid for qid in qids if qid not in found.questions or found.questions[qid].threshold is None]
    if missing:
        raise ConfigError(
            f"--review-below auto: expected a guaranteed threshold for every question asked in --calibration "
            f"{calibration}, got none for {missing}; fit it with python -m jevper.evaluate ... --fit "
            "--target-accuracy A --risk D, or give a number"
        )
    return found


def said(below: Below) -> str:
    """The threshold, as the command line reports it."""
    if isinstance(below, Calibration):
        return f"below the guaranteed thresholds of {below.source or 'the calibration'}"
    return f"with a confidence below {below:g}"


def row_unsure(row: Mapping[str, Any], qids: Sequence[str], below: Below) -> bool | None:
    """Whether any of the row's answers is below its threshold (``below``, or the calibration's for its
    question and top option; none met the target: every answer is); None for a row without answers."""
    if not isinstance(below, Calibration):
        top = row_top_probability(row, qids)
        return None if top is None else top < below
    answered = False
    for qid in qids:
        given = probabilities_of(row, qid)
        if given is None:
            continue
        answered = True
        options = list(given)
        p = renormalised(list(given.values()))
        label = options[max(range(len(p)), key=lambda i: (p[i], -i))]
        threshold = threshold_for(below, qid, label)
        if threshold is None or top_probability(p) < threshold:
            return True
    return False if answered else None


def row_top_probability(row: Mapping[str, Any], qids: Sequence[str]) -> float | None:
    """The lowest top probability over the row's answers; None for a row without answers. An answer
    that is no distribution is a ValueError (``_answers.probabilities_of``)."""
    tops = []
    for qid in qids:
        given = probabilities_of(row, qid)
        if given is not None:
            tops.append(top_probability(renormalised(list(given.values()))))
    return min(tops) if tops else None


def _unsure(output: Path, at: int, row: Mapping[str, Any], qids: Sequence[str], below: Below) -> bool:
    try:
        return bool(row_unsure(row, qids, below))
    except ValueError as exc:
        raise ConfigError(
            f"--review-below: OUTPUT {output}, row {at + 1}: {exc}; the batch writes distributions only: "
            "was the output edited?"
        ) from None


def write_review(output: Path, qids: Sequence[str], below: Below) -> tuple[Path, int]:
    """The rows of the finished ``output`` with an answer below ``below`` (a top probability, or a
    calibration's thresholds), written whole (a temporary file, then one rename) to
    ``review_path(output)``; the path and how many rows."""
    source = Input(output)
    schema = source.schema()
    path = review_path(output)
    count = read = 0
    with replacing(path) as temporary:
        writer = Writer(temporary, schema, format_of(output, "OUTPUT"))
        try:
            for batch in source.batches(_READ_ROWS):
                rows = batch.to_pylist()
                unsure = pa.array([_unsure(output, read + i, row, qids, below) for i, row in enumerate(rows)])
                read += len(rows)
                kept = batch.filter(unsure)
                if kept.num_rows:
                    writer.write(kept)
                    count += kept.num_rows
        finally:
            writer.close()
    return path, count
