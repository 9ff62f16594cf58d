"""The labelled rows asked of servers through the batch core, their answers kept as a batch output.

The answers go to a file beside the figures (``DIR/answers.parquet``), so an evaluation can be run again,
and a calibration fit again, without asking anything.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jevper._atomic import replacing, write_atomically
from jevper.batch import BatchClassifier, Server
from jevper.batch._core import state_values
from jevper.batch._dry import Preview, preview
from jevper.batch._files import Input, Writer
from jevper.batch._local import Tally, progress_line, provenance
from jevper.batch._provenance import record
from jevper.batch._schema import Row
from jevper.evaluate._fit import mean_prior
from jevper.evaluate._labels import distributions_by_row, read_table
from jevper.evaluate._metrics import Distribution
from jevper.evaluate._position import rotated
from jevper.questions import Choice, Question, as_question

#: Rows handed to the batch core at a time (its own concurrency spreads them over the servers).
BATCH_ROWS = 256
#: The content-free states of "Calibrate Before Use" (its empty one left out: a state must say something).
CONTENT_FREE = ("N/A", "[MASK]")
#: How often the progress is said: on a terminal, one line kept up to date; else a line at most this often.
REDRAW_S, LINE_S = 0.25, 5.0
PROG = "python -m jevper.evaluate"


async def ask(
    labelled: Path,
    questions: Mapping[str, Any],
    servers: Sequence[Server],
    output: Path,
    *,
    id_column: str = "id",
    state_column: str = "state",
    api: str = "auto",
    method: str = "auto",
    option_orders: int = 1,
    requests: RequestCount | None = None,
    server: Mapping[str, str | None] | None = None,
    cache: Path | None = None,
    cache_mode: str = "read-write",
) -> Path:
    """Every row of ``labelled`` asked every question; the batch's output written to ``output`` (Parquet),
    whole or not at all, with its provenance (``server``: the kind and release the server stated).
    ``requests`` counts the requests sent; ``cache`` is the batch's answer cache (a row asked before is
    answered from it, with no request). The progress is said on stderr as the batch says it
    (``Progress``)."""
    source = Input(labelled)
    checked = source.check(id_column)
    classifier = BatchClassifier(
        questions,
        servers,
        id_column=id_column,
        state_column=state_column,
        api=api,
        method=method,
        option_orders=option_orders,
        cache=cache,
        cache_mode=cache_mode,
    )
    schema = classifier.output_schema(checked.schema)
    progress = Progress(f"asking {output.name}", checked.rows, classifier)
    progress.start()
    try:
        with replacing(output) as temporary:
            writer = Writer(temporary, schema, "parquet")
            try:
                for batch in source.batches(BATCH_ROWS):
                    writer.write(await classifier.classify_rows(batch, on_row=progress.heard))
                record(writer, output, provenance(classifier, server))
            finally:
                writer.close()
    finally:
        progress.close()
        await classifier.aclose()
        if requests is not None:
            requests.sent += classifier.requests_sent
    if cache is not None and classifier.cache_hits:
        print(
            f"{PROG}: {output.name}: {classifier.cache_hits} rows answered from the cache {cache}",
            file=sys.stderr,
            flush=True,
        )
    return output


async def previewed(
    labelled: Path,
    runs: Sequence[tuple[str, Mapping[str, Any], Sequence[Any] | None]],
    servers: Sequence[Server],
    *,
    sample: bool,
    id_column: str = "id",
    state_column: str = "state",
    **options: Any,
) -> list[tuple[str, Preview]]:
    """The batch's dry run (``jevper.batch._dry.preview``) of each run an evaluation would ask: its name,
    its questions and its states (None: the labelled rows'); with ``sample``, a few rows of each are
    asked to time it."""
    rows: list[Any] = []
    for batch in Input(labelled).batches(BATCH_ROWS):
        rows.extend(state_values(batch.column(state_column)))
    found = []
    for name, questions, states in runs:
        classifier = BatchClassifier(
            questions, servers, id_column=id_column, state_column=state_column, **options
        )
        try:
            found.append((name, await preview(classifier, rows if states is None else states, sample=sample)))
        finally:
            await classifier.aclose()
    return found


class Progress:
    """The rows asked so far, said on stderr in the batch's words (rows done of all, rows/s, errors, each
    server) while they are asked, whether or not a row has finished: on a terminal one line kept up to
    date every REDRAW_S seconds, else a line every LINE_S seconds; and the last when they are done."""

    def __init__(self, what: str, total: int | None, classifier: BatchClassifier) -> None:
        self.what, self.classifier = what, classifier
        self.tally = Tally(total=total or 0)
        self.terminal = sys.stderr.isatty()
        self._ticking: asyncio.Future[None] | None = None

    def start(self) -> None:
        self._ticking = asyncio.ensure_future(self._tick())

    def heard(self, _at: int, row: Row) -> None:
        self.tally.count(row)
        self.tally.asked += 1

    def close(self) -> None:
        if self._ticking is not None:
            self._ticking.cancel()
        self._say(last=True)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(REDRAW_S if self.terminal else LINE_S)
            self._say()

    def _say(self, last: bool = False) -> None:
        if self.classifier.upstreams is not None:
            self.tally.servers = self.classifier.upstreams.status()
        head = f"{PROG}: {self.what}: "
        # A terminal's line is cut to its width; a log's is whole.
        width = shutil.get_terminal_size((100, 20)).columns if self.terminal else 10_000
        line = head + progress_line(self.tally, width - len(head))
        if self.terminal:
            sys.stderr.write("\r" + line + "\x1b[K" + ("\n" if last else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


class RequestCount:
    """The requests sent through the clients of ask(): what a setting cost, in requests."""

    def __init__(self) -> None:
        self.sent = 0


def rotations(given: Mapping[str, Any], asked: Mapping[str, Question]) -> list[dict[str, Any]]:
    """The choice questions with their options rotated by 1, 2, ... places: one questions object per
    rotation, holding each choice that has more options than that."""
    choices = {qid: q for qid, q in asked.items() if isinstance(q, Choice)}
    widest = max((len(q.options) for q in choices.values()), default=0)
    return [
        {
            qid: {**given[qid], "criteria": rotated(given[qid]["criteria"], by)}
            for qid, q in choices.items()
            if len(q.options) > by
        }
        for by in range(1, widest)
    ]


async def content_free(
    questions: Mapping[str, Any],
    servers: Sequence[Server],
    folder: Path,
    *,
    id_column: str = "id",
    state_column: str = "state",
    api: str = "auto",
    method: str = "auto",
    option_orders: int = 1,
    requests: RequestCount | None = None,
    cache: Path | None = None,
    cache_mode: str = "read-write",
) -> dict[str, Distribution]:
    """Per question, the model's mean answer to the content-free states: its lean before any content.
    The states and the answers are kept in ``folder`` (content-free.jsonl, content-free.answers.parquet)."""
    states = folder / "content-free.jsonl"
    lines = [{id_column: f"content-free-{i}", state_column: state} for i, state in enumerate(CONTENT_FREE, 1)]
    write_atomically(states, "".join(json.dumps(line) + "\n" for line in lines))
    output = await ask(
        states,
        questions,
        servers,
        folder / "content-free.answers.parquet",
        id_column=id_column,
        state_column=state_column,
        api=api,
        method=method,
        option_orders=option_orders,
        requests=requests,
        cache=cache,
        cache_mode=cache_mode,
    )
    return content_free_prior(questions, output, id_column)


def content_free_prior(
    questions: Mapping[str, Any], answers_path: Path, id_column: str = "id"
) -> dict[str, Distribution]:
    """Per question, the mean of the content-free states' answers kept at ``answers_path``."""
    answers = read_table(answers_path, id_column, "content-free ANSWERS")
    found: dict[str, Distribution] = {}
    for qid, given in questions.items():
        answered = list(distributions_by_row(answers, qid, as_question(qid, given)).values())
        if answered:
            found[qid] = mean_prior(answered)
    return found
