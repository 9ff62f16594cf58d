"""The answer cache while another connection holds the file's write lock (another process writing): a
cache opened then waits for it, as a write does."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from jevper._cache import AnswerCache

#: How long another connection holds the file's write lock.
HELD_S = 0.6


def test_a_cache_opened_while_another_connection_writes_waits_for_it_instead_of_failing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "answers.sqlite"
    AnswerCache(str(path)).close()
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another replica's write in progress
    threading.Timer(HELD_S, holder.execute, ("COMMIT",)).start()
    started = time.perf_counter()
    cache = AnswerCache(str(path))
    cache.put({"k"}, {"answers": {}})  # its first connection is opened here
    assert cache.get("k") is not None
    assert time.perf_counter() - started >= HELD_S * 0.9  # it waited for the lock, as a write does
    holder.close()
    cache.close()
