"""The batch core on Spark: ``mapInArrow`` over the core's Arrow batches, the answers as Spark structs.

``classify_dataframe`` returns the DataFrame of the core's output (the id and kept columns, one struct
per question with ``probabilities`` as a map, ``error``, ``usage``); each task asks its batches' rows
concurrently within its share of the servers' slots, on the classifier's own event loop thread.
``session`` starts a local Spark (``local[2]`` by default) whose Python workers run this interpreter.
Needs the ``spark`` extra and a Java runtime 17 or newer.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from jevper import ConfigError
from jevper.batch._core import BatchClassifier, ServerSpec
from jevper.batch._share import shared

__all__ = ["DEFAULT_MASTER", "classify_dataframe", "output_struct", "session"]

DEFAULT_MASTER = "local[2]"
#: Set in a Python driver that spark-submit started (the JVM's gateway to it).
SUBMITTED = "PYSPARK_GATEWAY_PORT"
#: Rows per Arrow batch handed to a task (Spark's default is 10,000): enough to fill every slot, few
#: enough that a task's last rows do not keep the others waiting long.
ROWS_PER_BATCH = 1024


def session(master: str | None = None, *, app_name: str = "jevper-batch", **conf: str) -> SparkSession:
    """The active Spark session, or a new one on ``master`` (``local[2]`` by default; under spark-submit,
    the master it was given). The Python workers are set to this interpreter (``PYSPARK_PYTHON`` unless
    set), so they see the same packages, else they start another Python, without pyarrow or jevper: on
    a cluster the same path must hold the same environment on every node."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is None and SUBMITTED in os.environ:
        master = ""  # spark-submit started this process: its --master holds
    else:
        master = master or DEFAULT_MASTER
        builder = builder.master(master)
    # In local mode the driver and its workers talk on loopback only.
    here = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    settings = {
        **(here if master.startswith("local") else {}),
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(ROWS_PER_BATCH),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        **conf,
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def output_struct(classifier: BatchClassifier, schema: StructType) -> StructType:
    """The Spark schema of what ``classifier`` makes of rows of ``schema``."""
    arrow = classifier.output_schema(to_arrow_schema(schema))
    return from_arrow_schema(arrow)


def classify_dataframe(
    frame: DataFrame,
    questions: Mapping[str, Any],
    servers: Sequence[ServerSpec],
    *,
    tasks: int | None = None,
    **options: Any,
) -> DataFrame:
    """``frame`` with every row classified (docs/batch.md). Each server's slots are shared between the
    ``tasks`` that run at once (default: the session's default parallelism), so that together they keep
    to the server's limit. ``options`` are ``BatchClassifier``'s."""
    if tasks is None:
        tasks = frame.sparkSession.sparkContext.defaultParallelism
    if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1:
        raise ConfigError(f"tasks: expected a positive integer, got {tasks!r}")
    if frame.rdd.getNumPartitions() < tasks:
        # A small file is one partition: one task would ask every row while the other executors wait.
        frame = frame.repartition(tasks)
    specs = shared(servers, tasks)
    # Checked on the driver, before any task runs: questions, servers, options and columns.
    classifier = BatchClassifier(questions, specs, **options)
    schema = output_struct(classifier, frame.schema)
    arrow_schema = classifier.output_schema(to_arrow_schema(frame.schema))

    def classify(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            for batch in batches:
                yield classifier.classify_sync(batch).cast(arrow_schema)
        finally:
            classifier.close()

    return frame.mapInArrow(classify, schema)
