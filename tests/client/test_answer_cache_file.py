"""The answer cache's file under several writers: two processes writing at once lose nothing, threads
share one cache, and a writer killed mid-write (SIGKILL) leaves a file that opens, reads and takes writes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from jevper._cache import AnswerCache

#: A writer: ``N`` entries, each in its own transaction, keys prefixed by its name; then "done".
WRITER = textwrap.dedent(
    """
    import sys
    from jevper._cache import AnswerCache
    path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cache = AnswerCache(path)
    print("ready", flush=True)
    for i in range(count):
        cache.put({f"{name}-{i}"}, {"answers": {}, "i": i, "padding": "x" * 2000})
        if i == 50:
            print("written", flush=True)
    print("done", flush=True)
    """
)


def writer(path: Path, name: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), name, str(count)],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    writers = [writer(path, name, 400) for name in ("one", "two")]
    for process in writers:
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0 and out.split()[-1] == "done"
    cache = AnswerCache(str(path))
    assert len(cache) == 800
    assert all(cache.get(f"{name}-{i}") is not None for name in ("one", "two") for i in range(400))


def test_threads_of_one_process_share_a_cache(tmp_path: Path) -> None:
    cache = AnswerCache(str(tmp_path / "answers.sqlite"))

    def write(i: int) -> None:
        cache.put({f"k{i}"}, {"answers": {}, "i": i})
        assert cache.get(f"k{i}") is not None

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(200)))
    assert len(cache) == 200
    cache.close()


def test_a_writer_killed_mid_write_leaves_a_readable_cache(tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    process = writer(path, "killed", 100_000)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    assert process.stdout.readline().strip() == "written"
    time.sleep(0.2)  # well inside its writes
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    cache = AnswerCache(str(path))
    kept = len(cache)
    assert 50 < kept < 100_000
    assert all(
        cache.get(f"killed-{i}") == {"answers": {}, "i": i, "padding": "x" * 2000, "format": 1}
        for i in range(kept)
    )
    cache.put({"after"}, {"answers": {}})
    assert len(cache) == kept + 1
