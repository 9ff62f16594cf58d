"""The answer cache while another connection holds the file's write lock (another process writing): a
cache opened then waits for it, as a write does; the async client waits off its event loop, which goes
on running other tasks meanwhile."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

from jevper import AsyncSystemOneClient, Choice
from jevper._cache import AnswerCache
from jevper.testing.bodies import chat_label

QUESTIONS = {"intent": Choice(criteria={"billing": "money", "technical": "errors"})}
STATE = "I was charged twice."
#: How long another connection holds the file's write lock.
HELD_S = 1.0


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


def test_a_cache_write_waiting_for_the_file_does_not_stop_the_event_loop(
    loopback: Any, tmp_path: Path
) -> None:
    path = tmp_path / "answers.sqlite"
    AnswerCache(str(path)).close()  # the file and its table exist
    loopback.reply("/chat/completions", 200, chat_label())
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # the write lock: the client's put waits for it
    released = threading.Timer(HELD_S, holder.execute, ("COMMIT",))

    async def run() -> tuple[float, Any]:
        sdk = AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0)
        async with AsyncSystemOneClient(
            sdk, model="m", api="chat_completions", method="logprobs", cache=path
        ) as asking:
            gaps: list[float] = []

            async def tick() -> None:
                last = time.perf_counter()
                while True:
                    await asyncio.sleep(0.01)
                    now = time.perf_counter()
                    gaps.append(now - last)
                    last = now

            ticking = asyncio.create_task(tick())
            await asyncio.sleep(0.03)  # the ticker runs before the call's first lookup
            released.start()
            answered = await asking.system_one(state=STATE, questions=QUESTIONS)
            await asyncio.sleep(0.05)  # the ticker sees the loop again: a stall just ended is counted
            ticking.cancel()
            return max(gaps, default=HELD_S), answered

    longest, answered = asyncio.run(run())
    holder.close()
    assert answered.debug["cache"]["written"] is True
    assert AnswerCache(str(path)).get(answered.debug["cache"]["key"]) is not None
    # The loop kept ticking while the write waited for the lock (blocked, one gap would be nearly HELD_S;
    # 0.7 of it leaves room for a stall of a loaded machine, 0.42 s seen once in CI).
    assert longest < HELD_S * 0.7, f"the event loop stood still for {longest:.3f} s during the cache write"
