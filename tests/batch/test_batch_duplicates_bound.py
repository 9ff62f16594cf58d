"""The batch's memory of the states it has answered (each asked once per run) is bounded: it keeps the
``duplicates_kept`` answered most lately, so a million-row table does not grow it without end; a state
answered before that and seen again is answered from the cache where one is given (still asked once in
the run), and asked again where none is."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pyarrow as pa
from _batch_data import QUESTIONS, posts

from jevper.batch import BatchClassifier, Server
from jevper.testing.faults import FaultServer, running

KEPT = 8


def rows(states: list[str]) -> pa.RecordBatch:
    return pa.record_batch({"id": list(range(len(states))), "state": states})


def classifier(server: FaultServer, **options: Any) -> BatchClassifier:
    made = BatchClassifier(
        QUESTIONS, [Server(server.base_url(), "fault-model", slots=2)], api="systemone", **options
    )
    made.duplicates_kept = KEPT
    return made


def classified(made: BatchClassifier, batch: pa.RecordBatch) -> pa.RecordBatch:
    async def run() -> pa.RecordBatch:
        try:
            return await made.classify(batch)
        finally:
            await made.aclose()

    return asyncio.run(run())


def test_the_answered_states_kept_in_memory_are_bounded() -> None:
    states = [f"ticket {i}" for i in range(200)]
    with running() as server:
        made = classifier(server)
        classified(made, rows(states))
        assert posts(server) == 200
    assert len(made._once) <= KEPT


def test_a_state_repeated_close_by_is_still_answered_as_its_first() -> None:
    states = [f"ticket {i // 2}" for i in range(40)]  # each state twice, one after the other
    with running() as server:
        made = classifier(server)
        out = classified(made, rows(states))
        assert posts(server) == 20
    assert made.duplicates == 20
    answers = out.column("topic").to_pylist()
    assert all(answers[i] == answers[i - 1] for i in range(1, 40, 2))


def test_with_the_cache_a_state_seen_long_before_is_answered_from_it_not_asked_again(tmp_path: Path) -> None:
    states = [f"ticket {i}" for i in range(30)]
    with running() as server:
        made = classifier(server, cache=tmp_path / "answers.sqlite")
        classified(made, rows(states + states[:5]))  # the first five come back after 30 others
        assert posts(server) == 30
    assert made.cache_hits + made.duplicates == 5
    assert len(made._once) <= KEPT
