"""``--engine ray|spark`` of the command line: the same INPUT, OUTPUT, questions, servers and options.

The engine reads INPUT with its own reader and writes Parquet parts into ``OUTPUT.<engine>-parts/``;
the parts are then joined into OUTPUT in its format (the local engine's writer) and removed. On Ray the
parts are committed with Ray's own checkpointing (``OUTPUT.ray-checkpoint/``), so ``--resume`` after a
crash asks only the rows with no committed result; what the run asked, and of which models, is kept in
``OUTPUT.ray-run/manifest.json``, so a resume asking anything else is refused as the local engine's is.
Spark retries failed tasks itself and has no resume.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from jevper import ConfigError
from jevper._atomic import replacing
from jevper._upstreams import Upstream
from jevper.batch._core import BatchClassifier
from jevper.batch._files import Writer, format_of
from jevper.batch._local import Tally, asked
from jevper.batch._parts import Parts

ENGINES = ("local", "ray", "spark")


def folders(output: Path, engine: str) -> tuple[Path, Path]:
    """Where an engine's parts and (Ray's) checkpoint go beside OUTPUT."""
    return (
        output.with_name(f"{output.name}.{engine}-parts"),
        output.with_name(f"{output.name}.{engine}-checkpoint"),
    )


def run_engine(
    engine: str,
    source: Path,
    output: Path,
    questions: Mapping[str, Any],
    servers: Sequence[Upstream],
    *,
    resume: bool,
    workers: int | None,
    address: str | None,
    options: Mapping[str, Any],
    part_rows: int | None = None,
) -> Tally:
    """Classify ``source`` into ``output`` on ``engine``; the tally of what OUTPUT holds. On Ray each
    ``part_rows`` rows (default ``ray.DEFAULT_PART_ROWS``) are one part, one commit for ``--resume``."""
    parts, checkpoint = folders(output, engine)
    if engine == "spark" and resume:
        raise ConfigError(
            "--resume: expected --engine local or ray, got spark; Spark retries a failed task itself "
            "and keeps nothing of a stopped job: run again without --resume"
        )
    if parts.exists() and not resume:
        raise ConfigError(
            f"OUTPUT {output}: expected no parts of an earlier run, got {parts}; pass --resume to "
            "finish that run (ray), or remove the folder"
        )
    tally = Tally()
    run = Parts(output, folder=output.with_name(f"{output.name}.{engine}-run"))
    if engine == "ray":
        # Checked before Ray starts: a resume that asks other questions, or of another model, is refused.
        fresh = not run.folder.exists()
        run.start(manifest(source, BatchClassifier(questions, servers, **options)), resume=resume)
        from jevper.batch import ray as engine_ray

        try:
            engine_ray.init(address)
        except ConfigError:
            if fresh:  # nothing was asked: the same command runs again without --resume
                shutil.rmtree(run.folder, ignore_errors=True)
            raise
        engine_ray.classify_files(
            source,
            parts,
            questions,
            servers,
            checkpoint=checkpoint,
            actors=workers or 1,
            part_rows=engine_ray.DEFAULT_PART_ROWS if part_rows is None else part_rows,
            **options,
        )
    else:
        from jevper.batch import spark as engine_spark

        session = engine_spark.session(address)
        frame = _spark_read(session, source)
        classified = engine_spark.classify_dataframe(frame, questions, servers, tasks=workers, **options)
        classified.write.mode("overwrite").parquet(str(parts))
    _join(parts, output, tally)
    shutil.rmtree(parts)
    shutil.rmtree(checkpoint, ignore_errors=True)
    shutil.rmtree(run.folder, ignore_errors=True)
    return tally


def manifest(source: Path, classifier: BatchClassifier) -> dict[str, Any]:
    """What a Ray run asked: its input (a file or a folder) and what decides its answers, as the local
    engine's manifest holds them."""
    return {"version": 1, "input": str(source.resolve()), **asked(classifier)}


def _spark_read(session: Any, source: Path) -> Any:
    fmt = format_of(source, "INPUT")
    if fmt == "parquet":
        return session.read.parquet(str(source))
    if fmt == "csv":
        return session.read.option("header", "true").csv(str(source))  # every column as text
    return session.read.json(str(source))


def _join(parts: Path, output: Path, tally: Tally) -> None:
    """The parts, one after another, into OUTPUT in its format, renamed into place when whole."""
    files = sorted(p for p in parts.rglob("*.parquet") if not p.name.startswith((".", "_")))
    if not files:
        raise ConfigError(f"INPUT: expected rows, got none written to {parts}")
    schema = pq.read_schema(files[0])
    with replacing(output) as temporary:
        writer = Writer(temporary, schema, format_of(output, "OUTPUT"))
        try:
            for path in files:
                for batch in pq.ParquetFile(path).iter_batches():
                    writer.write(batch.cast(schema) if batch.schema != schema else batch)
                    _count(batch, tally)
        finally:
            writer.close()


def _count(batch: pa.RecordBatch, tally: Tally) -> None:
    tally.total += batch.num_rows
    tally.done += batch.num_rows
    tally.asked += batch.num_rows
    errors = batch.column("error")
    tally.answered += errors.null_count
    for kind in errors.field("type").filter(errors.is_valid()).to_pylist():
        tally.errors[kind] += 1
