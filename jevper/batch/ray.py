"""The batch core on Ray Data: a callable class for ``Dataset.map_batches`` and a function over a Dataset.

``Classify`` holds one ``BatchClassifier`` per actor (its clients and their connection pools are made in
the actor, on first use); each batch arrives as a ``pyarrow.Table`` and its rows are asked concurrently
within the actor's share of the servers' slots. ``classify_dataset`` puts it on a Dataset with an actor
pool; ``classify_files`` runs read -> classify -> write with Ray's own checkpointing, so a job killed
mid-way and run again asks only the rows with no committed result. Needs the ``ray`` extra.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray
import ray.data
from ray.data.checkpoint import CheckpointConfig

from jevper import ConfigError
from jevper.batch._core import BatchClassifier, ServerSpec
from jevper.batch._share import shared

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "PLACEMENT_TIMEOUT",
    "REACH_TIMEOUT",
    "Classify",
    "classify_dataset",
    "classify_files",
    "init",
]

#: Rows per map_batches call: large enough that a batch keeps every slot busy, small enough that a
#: checkpoint commits often.
DEFAULT_BATCH_SIZE = 256
#: Rows per block into the map (and so per written part of ``classify_files``, one commit each).
DEFAULT_PART_ROWS = 1024
#: CPU reserved per actor: its work is waiting on servers, and a whole CPU per actor starves the
#: read and write tasks of a small cluster (2 actors on 2 CPUs deadlocked a read -> map -> write here).
ACTOR_CPUS = 0.25
#: CPU reserved per read, repartition or write task: with a whole CPU each, the writes of a 2-CPU cluster
#: waited behind the reads and nothing was committed until the end, and on nodes of one CPU beside the
#: actors a repartition task fitted nowhere and the job waited with no error.
IO_CPUS = 0.25
#: Seconds the actor pool may take to be placed and started before the job stops with a ConfigError
#: (Ray Data's ``wait_for_min_actors_s``); an actor's start imports jevper and its client on a busy node.
PLACEMENT_TIMEOUT = 120
#: Seconds to wait for a cluster's head to accept a connection before ``init`` gives up on it (Ray itself
#: retries for minutes, printing its own warnings).
REACH_TIMEOUT = 5.0
_FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}


class Classify:
    """``ds.map_batches(Classify, fn_constructor_args=(questions, servers), fn_constructor_kwargs=options,
    batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=N))``: every row back, with its
    answers or its error. ``options`` are ``BatchClassifier``'s."""

    def __init__(self, questions: Mapping[str, Any], servers: Sequence[ServerSpec], **options: Any) -> None:
        self.classifier = BatchClassifier(questions, servers, **options)

    def __del__(self) -> None:
        # Ray Data deletes the class when its actor is done (not when the actor is killed): the
        # servers' connections close then, rather than being left to the interpreter's exit.
        with contextlib.suppress(Exception):
            self.classifier.close()

    async def __call__(self, batch: pa.Table) -> pa.Table:
        # One record batch: the core asks a batch's rows concurrently, a table's chunks one by one.
        table = batch.combine_chunks()
        parts = table.to_batches()
        if not parts:
            return pa.Table.from_batches([], schema=self.classifier.output_schema(table.schema))
        return pa.Table.from_batches([await self.classifier.classify(parts[0])])


def classify_dataset(
    dataset: ray.data.Dataset,
    questions: Mapping[str, Any],
    servers: Sequence[ServerSpec],
    *,
    actors: int = 1,
    batch_size: int = DEFAULT_BATCH_SIZE,
    batches_per_actor: int = 2,
    block_rows: int | None = DEFAULT_PART_ROWS,
    **options: Any,
) -> ray.data.Dataset:
    """``dataset`` with every row classified: the id (and kept columns), one struct per question,
    ``error`` and ``usage`` (docs/batch.md). ``actors`` is the pool's size; each server's slots are
    shared between them (``shared``); ``batches_per_actor`` batches are in flight in each actor, so one
    batch's last rows do not leave its slots idle. ``options`` are ``BatchClassifier``'s."""
    if isinstance(actors, bool) or not isinstance(actors, int) or actors < 1:
        raise ConfigError(f"actors: expected a positive integer, got {actors!r}")
    specs = shared(servers, actors)
    # Checked here, before any actor starts: the questions, the servers, the options, the columns.
    classifier = BatchClassifier(questions, specs, **options)
    schema = dataset.schema(fetch_if_missing=False)
    if isinstance(schema, ray.data.Schema) and isinstance(schema.base_schema, pa.Schema):
        classifier.output_schema(schema.base_schema)
    if block_rows is not None:
        dataset = _cut(dataset, block_rows)
    return dataset.map_batches(
        Classify,
        fn_constructor_args=(questions, specs),
        fn_constructor_kwargs=options,
        batch_format="pyarrow",
        batch_size=batch_size,
        compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=batches_per_actor),
        num_cpus=ACTOR_CPUS,
    )


def classify_files(
    source: str | Path,
    target: str | Path,
    questions: Mapping[str, Any],
    servers: Sequence[ServerSpec],
    *,
    checkpoint: str | Path | None = None,
    id_column: str = "id",
    part_rows: int = DEFAULT_PART_ROWS,
    placement_timeout: int | None = None,
    **options: Any,
) -> None:
    """Read ``source`` (Parquet, JSON Lines or CSV, by suffix; a file or a folder of them), classify it
    and write Parquet parts into the folder ``target``. With ``checkpoint`` (a folder every node can
    reach), Ray's own checkpointing records each written row's id there: the same call after a crash
    asks only the rows with no committed result and adds their parts beside the ones already written.
    The input is read in blocks of about ``part_rows`` rows, each written as one part (one commit); a
    ``batch_size`` larger than ``part_rows`` is taken down to it.
    A pool of actors the cluster cannot place and start within ``placement_timeout`` seconds (default:
    Ray Data's ``wait_for_min_actors_s`` where it is set, as by ``RAY_DATA_DEFAULT_WAIT_FOR_MIN_ACTORS_S``,
    else ``PLACEMENT_TIMEOUT``) stops the job with a ``ConfigError`` naming what was asked and what the
    cluster has.
    """
    source, target = _where(source), _where(target)
    reader = _reader(Path(source))
    context = ray.data.DataContext.get_current()
    previous = context.checkpoint_config, context.wait_for_min_actors_s
    if placement_timeout is None:
        placement_timeout = previous[1] if previous[1] > 0 else PLACEMENT_TIMEOUT
    context.wait_for_min_actors_s = placement_timeout
    if checkpoint is not None:
        context.checkpoint_config = CheckpointConfig(
            id_column=id_column, checkpoint_path=_where(checkpoint), delete_checkpoint_on_success=False
        )
    try:
        dataset = reader(source, num_cpus=IO_CPUS)
        # A map batch of more rows than a block joins blocks into one task and so one part: 200 rows in
        # blocks of 20 were one task and one commit under the default batch of 256.
        options["batch_size"] = min(options.get("batch_size", DEFAULT_BATCH_SIZE), part_rows)
        classified = classify_dataset(
            dataset, questions, servers, id_column=id_column, block_rows=part_rows, **options
        )
        classified.write_parquet(target, ray_remote_args={"num_cpus": IO_CPUS})
    except ray.exceptions.GetTimeoutError as late:
        if "starting actors" not in str(late):
            raise
        raise ConfigError(_unplaced(options.get("actors", 1), placement_timeout)) from None
    finally:
        context.checkpoint_config, context.wait_for_min_actors_s = previous


def _cut(dataset: ray.data.Dataset, rows: int) -> ray.data.Dataset:
    """``dataset`` in blocks of at most ``rows`` rows, cut by a task of ``IO_CPUS``. Ray's repartition
    takes no resource arguments and asks a whole CPU per task by default: its logical operator's own
    remote arguments are where Ray looks for them."""
    cut = dataset.repartition(target_num_rows_per_block=rows)
    operator: Any = cut._logical_plan.dag
    operator.ray_remote_args["num_cpus"] = IO_CPUS
    return cut


def _unplaced(actors: int, seconds: int) -> str:
    """What a pool that could not be placed asked, against what the cluster has."""
    cluster: Any = ray  # its state functions are untyped
    total, free = cluster.cluster_resources().get("CPU", 0.0), cluster.available_resources().get("CPU", 0.0)
    nodes = sum(1 for node in cluster.nodes() if node.get("Alive"))
    return (
        f"--workers {actors}: expected the Ray cluster to start {actors} actors of {ACTOR_CPUS:g} CPU each "
        f"within {seconds} s, got fewer; it has {nodes} nodes with {total:g} CPUs ({free:g} free): ask "
        "fewer workers, add nodes, or free the CPUs other jobs hold"
    )


def _where(path: str | Path) -> str:
    """A URI as it is; a local path made absolute (Ray's workers do not share the driver's cwd)."""
    text = str(path)
    return text if "://" in text else str(Path(text).resolve())


def _reader(source: Path) -> Any:
    suffix = source.suffix.lower()
    if source.is_dir():
        found = {p.suffix.lower() for p in source.iterdir() if p.suffix.lower() in _FORMATS}
        suffix = found.pop() if len(found) == 1 else ""
    kind = _FORMATS.get(suffix)
    if kind is None:
        raise ConfigError(
            f"input {source}: expected a .parquet, .jsonl or .csv file (or a folder of one kind), got "
            f"{source.name!r}"
        )
    return {"parquet": ray.data.read_parquet, "json": ray.data.read_json, "csv": ray.data.read_csv}[kind]


def init(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    object_store_memory: int | None = None,
    **options: Any,
) -> None:
    """Start Ray if it is not running: a local cluster by default (``num_cpus`` and
    ``object_store_memory`` bound it), or join the cluster at ``address`` (or ``RAY_ADDRESS``): a head
    that does not accept a connection within ``REACH_TIMEOUT`` seconds is a ``ConfigError`` naming it."""
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is not None:
        _reachable(address, REACH_TIMEOUT)
    if address is None:
        options.update(num_cpus=num_cpus, object_store_memory=object_store_memory)
        options.setdefault("include_dashboard", False)
    ray.init(address=address, **options)


def _reachable(address: str, seconds: float) -> None:
    """A ConfigError unless the head at ``address`` (``HOST:PORT`` or ``ray://HOST:PORT``) accepts a TCP
    connection within ``seconds``; ``auto`` and ``local`` are Ray's to resolve."""
    if address in ("auto", "local"):
        return
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit() or not host:
        raise ConfigError(
            f"Ray address {address!r} (--engine-address or RAY_ADDRESS): expected HOST:PORT of a cluster's "
            "head (the address `ray start --head` prints), ray://HOST:PORT or auto"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except OSError as failed:
        reason = failed.strerror or type(failed).__name__
        raise ConfigError(
            f"Ray cluster at {address} (--engine-address or RAY_ADDRESS): expected its head to accept a "
            f"connection within {seconds:g} s, got {reason}; start it (`ray start --head --port {port}`) "
            "or give the address it printed"
        ) from None
