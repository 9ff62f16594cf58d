"""The local engine: a file streamed through the batch core, its results committed as the run goes.

Two batches are in flight at a time, so the last rows of one overlap the first of the next and the
servers never wait on a batch's slowest row; memory holds those two batches and nothing else of the
input or the output.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from jevper._upstreams import NoUpstreamError, UpstreamStatus
from jevper.batch._core import BatchClassifier
from jevper.batch._files import Input, format_of
from jevper.batch._parts import Parts
from jevper.batch._provenance import described
from jevper.batch._schema import Row
from jevper.calibration import Calibration

#: Rows per batch (and per committed part).
DEFAULT_BATCH_ROWS = 1024
#: Batches asked at once.
WINDOW = 2


@dataclass
class Tally:
    """What a run has done so far, for the progress bar and the summary line."""

    total: int = 0
    done: int = 0  # rows with a result, this run or an earlier one
    asked: int = 0  # rows answered or failed in this run
    answered: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)
    servers: list[UpstreamStatus] = field(default_factory=list)

    def count(self, row: Row) -> None:
        self.done += 1
        if row.error is None:
            self.answered += 1
        else:
            self.errors[row.error[0]] += 1

    @property
    def wall(self) -> float:
        return time.monotonic() - self.started

    @property
    def rate(self) -> float:
        return self.asked / self.wall if self.wall > 0 else 0.0


class Stopped(Exception):
    """The run stopped before every row had a result (no server could be reached)."""

    def __init__(self, reason: NoUpstreamError) -> None:
        super().__init__(str(reason))
        self.reason = reason


def manifest(classifier: BatchClassifier, source: Input, batch_rows: int) -> dict[str, Any]:
    stat = source.path.stat()
    return {
        "version": 1,
        "input": str(source.path.resolve()),
        "input_bytes": stat.st_size,
        "input_mtime_ns": stat.st_mtime_ns,
        "batch_rows": batch_rows,
        **asked(classifier),
    }


def asked(classifier: BatchClassifier) -> dict[str, Any]:
    """What decides a run's answers, for its manifest: the questions, the columns, the models and how they
    are asked (never a server's URL or key: another server serving the same model is the same run).
    A resume asking another model, or in another way, would mix two runs."""
    questions = json.dumps([[qid, repr(q)] for qid, q in classifier.questions], sort_keys=True)
    options = classifier.client_options
    calibration = options.get("calibration")
    return {
        "questions_sha256": hashlib.sha256(questions.encode()).hexdigest(),
        "id_column": classifier.id_column,
        "state_column": classifier.state_column,
        "keep_columns": classifier.keep_columns
        if isinstance(classifier.keep_columns, bool)
        else list(classifier.keep_columns),
        "models": sorted({server.model for server in classifier.servers}),
        "api": options["api"],
        "method": options["method"],
        "extra_body": options["extra_body"],
        # Choices asked in several orders name how many (a run asking one order names none).
        **({"option_orders": options["option_orders"]} if "option_orders" in options else {}),
        # A calibrated run names its calibration's digest (an uncalibrated one names none).
        **({"calibration": calibration.digest()} if isinstance(calibration, Calibration) else {}),
        # An escalating run names the second model, its threshold and calibration (a resume mixing in
        # another would give two kinds of answers to one column).
        **({"escalation": escalated(classifier)} if classifier.escalation is not None else {}),
    }


def escalated(classifier: BatchClassifier) -> dict[str, Any]:
    escalation = classifier.escalation
    assert escalation is not None
    fit = classifier.escalation_options.get("calibration")
    return {
        "model": escalation.to.model,
        "below": escalation.below,
        "api": classifier.escalation_options["api"],
        "method": classifier.escalation_options["method"],
        "calibration": fit.digest() if isinstance(fit, Calibration) else None,
    }


async def run(
    classifier: BatchClassifier,
    source: Input,
    output: Path,
    *,
    resume: bool = False,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    tally: Tally | None = None,
    checked_rows: int | None = None,
    server: Mapping[str, str | None] | None = None,
) -> Tally:
    """Classify every row of ``source`` into ``output``; raises Stopped when no server answers (what was
    done stays committed, for ``resume``). ``server``: the servers' kind and release where they stated
    them, for the output's provenance."""
    tally = tally or Tally()
    schema = classifier.output_schema(source.schema())
    fmt = format_of(output, "OUTPUT")
    parts = Parts(output)
    earlier = parts.earlier() if resume else None
    if earlier is not None and isinstance(earlier.get("batch_rows"), int):
        batch_rows = earlier["batch_rows"]  # the same cuts, so a committed part is a whole batch again
    parts.start(manifest(classifier, source, batch_rows), resume=resume)
    tally.total = checked_rows if checked_rows is not None else 0
    in_flight: set[asyncio.Task[None]] = set()
    stop: list[NoUpstreamError] = []
    try:
        for index, batch in enumerate(source.batches(batch_rows)):
            if stop:
                break
            if parts.committed(index):
                answered, errors = parts.tally(index)
                tally.done += batch.num_rows
                tally.answered += answered
                tally.errors.update(errors)
                continue
            while len(in_flight) >= WINDOW:
                finished, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                in_flight -= finished
                for task in finished:
                    task.result()
            if stop:
                break
            task = asyncio.ensure_future(_batch(classifier, parts, index, batch, tally, stop))
            in_flight.add(task)
        if in_flight:
            await asyncio.gather(*in_flight)
            in_flight.clear()
    finally:
        for task in in_flight:
            task.cancel()
        if classifier.upstreams is not None:
            tally.servers = classifier.upstreams.status()
        await classifier.aclose()
    if stop:
        raise Stopped(stop[0])
    parts.finish(schema, fmt, provenance(classifier, server))
    return tally


def provenance(classifier: BatchClassifier, server: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """What answered the rows this classifier asked, for the output (``_provenance``)."""
    models = [s.model for s in classifier.servers]
    found = described(
        dict(classifier.questions), models, classifier.client_options, classifier.answered, server
    )
    if classifier.escalation is None:
        return found
    # Two models answered: none is the one the answers came from (the evaluation's --fit refuses them).
    second = escalated(classifier)
    found.update(
        model=None,
        models=sorted({*found["models"], second["model"]}),
        escalation={"model": second["model"], "below": second["below"], "calibration": second["calibration"]},
    )
    return found


async def _batch(
    classifier: BatchClassifier,
    parts: Parts,
    index: int,
    batch: pa.RecordBatch,
    tally: Tally,
    stop: list[NoUpstreamError],
) -> None:
    ids = batch.column(classifier.id_column).to_pylist()
    known = parts.journaled(index, ids)
    for row in known.values():
        tally.count(row)
    journal = parts.journal(index)
    unreachable = False

    def heard(at: int, row: Row) -> None:
        nonlocal unreachable
        if row.error is not None and row.error[0] == NoUpstreamError.__name__:
            unreachable = True
            if not stop:
                stop.append(NoUpstreamError(row.error[1], status=None, server_message=row.error[1]))
            return
        journal.write(at, ids[at], row)
        tally.asked += 1
        tally.count(row)

    try:
        out = await classifier.classify_rows(batch, known=known, on_row=heard)
    finally:
        journal.close()
    if not unreachable:
        # Written and fsynced on a thread: the other batch's rows go on being asked meanwhile.
        await asyncio.to_thread(parts.commit, index, out)


def progress_line(tally: Tally, width: int) -> str:
    """One line: rows done of all, rows/s, errors, and each server's state."""
    share = f" {100 * tally.done / tally.total:.0f}%" if tally.total else ""
    errors = sum(tally.errors.values())
    servers = []
    for i, s in enumerate(tally.servers, 1):
        state = f"out {s.out_for:.0f}s" if s.out_for > 0 else f"{s.in_flight}/{s.slots}"
        servers.append(f"#{i} {state} {s.succeeded} ok" + (f" {s.failed} failed" if s.failed else ""))
    line = (
        f"{tally.done}/{tally.total or '?'} rows{share} | {tally.rate:.1f} rows/s | {errors} errors | "
        + " | ".join(servers)
    )
    return line[: max(10, width - 1)]


def summary_line(tally: Tally, rows: int) -> str:
    errors = sum(tally.errors.values())
    kinds = ", ".join(f"{kind} {n}" for kind, n in tally.errors.most_common())
    return (
        f"jevper.batch: {rows} rows, {tally.answered} answered, {errors} errors"
        + (f" ({kinds})" if kinds else "")
        + f", {tally.wall:.1f} s, {tally.rate:.1f} rows/s"
        + (f" ({tally.asked} asked in this run)" if tally.asked != rows else "")
    )


Refresh = Callable[[Tally], None]
