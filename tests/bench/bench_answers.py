"""The answer cache, duplicates asked once and the dry run, measured on the embedded llama.cpp.

- A miss's overhead: the cache's own work on a call it does not hold (the key, the lookup that misses,
  the write of the answer under its two keys) timed on the calls just asked, against the embedded
  server's median time per question (one Choice, the async client over jevper's own connection).
- A hit against asking: the same call answered from the file by ``AsyncSystemOneClient.system_one``
  (the lookup on a worker thread, as every call makes it) against the median asked call.
- 1M cached lookups: a file of 1,000,000 entries read by key 1,000,000 times in a process of its own,
  its peak resident memory against the same process after 100,000 lookups (bounded: about equal).
- The batch core over the server: a table of distinct rows asked with the cache, then asked again by a
  new classifier (a rerun of a finished batch: 0 requests); a table of the same size whose rows are 50%
  duplicates sends half the requests of the distinct one.
- The dry run's prompt tokens (``jevper.batch._dry.preview``, counted by the server's /tokenize) against
  the input tokens the real run of the same rows reports.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import Figure, Section, load_average

from jevper import AsyncSystemOneClient, Choice
from jevper._cache import AnswerCache
from jevper._http import HTTPClient
from jevper.batch import BatchClassifier, Server
from jevper.batch._dry import preview
from jevper.servers.llamacpp import DEFAULT_RELEASE, slot_args, spawn_llamacpp

SECTION = ("answers", "Answer cache, duplicates and the dry run", "scripts/bench answers")
QUESTIONS = {
    "topic": Choice(
        criteria={"billing": "money, invoices", "technical": "errors, crashes", "sales": "pricing, plans"}
    )
}
ASKED_CALLS = 24
ROWS = 32
LOOKUPS = 1_000_000
SLOTS = 2
MAX_MISS_SHARE, MIN_HIT_SPEEDUP, MAX_TOKEN_ERROR = 0.02, 100.0, 0.01
_OPENERS = ("I was charged twice", "The app crashes", "Which plan has", "My invoice shows", "Login fails")


def ticket(i: int) -> str:
    """A short, distinct support ticket."""
    return (
        f"{_OPENERS[i % len(_OPENERS)]} (ticket {i}): order {1000 + 7 * i}, please help by day {i % 28 + 1}."
    )


# --- the client on the server: a miss's overhead, a hit's speed ------------------------------------


async def _client_figures(base_url: str, model: str, folder: Path) -> dict[str, float]:
    cache = folder / "client.sqlite"
    http = HTTPClient(base_url)
    plain = AsyncSystemOneClient(http, model=model, max_concurrency=1)
    cached = AsyncSystemOneClient(http, model=model, max_concurrency=1, cache=str(cache))
    try:
        await plain.system_one(state=ticket(-1), questions=QUESTIONS)  # the server warm, auto settled
        await cached.system_one(state=ticket(-1), questions=QUESTIONS)
        asked, misses = [], []
        for i in range(ASKED_CALLS):
            started = time.perf_counter()
            response = await plain.system_one(state=ticket(i), questions=QUESTIONS)
            asked.append(time.perf_counter() - started)
            # The cache's own work on a miss of this call, as system_one does it: the key and the
            # lookup that misses, then the answer written under its two keys.
            plan = cached._plan(ticket(i), QUESTIONS, {})
            started = time.perf_counter()
            assert cached._cached(plan) is None
            cached._kept(plan, response)
            misses.append(time.perf_counter() - started)
        hits = []
        for i in range(ASKED_CALLS):
            started = time.perf_counter()
            hit = await cached.system_one(state=ticket(i), questions=QUESTIONS)
            hits.append(time.perf_counter() - started)
            assert hit.debug["cache"]["hit"] and hit.usage.n_calls == 0
    finally:
        await cached.aclose()
        await plain.aclose()
        await http.close()
    return {
        "asked": statistics.median(asked),
        "miss": statistics.mean(misses),
        "hit": statistics.median(hits),
    }


# --- 1M lookups in a process of their own ----------------------------------------------------------

FILL = """
import sys
from jevper._cache import AnswerCache
path, count, entry = sys.argv[1], int(sys.argv[2]), __import__("json").loads(sys.argv[3])
cache = AnswerCache(path)
for start in range(0, count, 10_000):
    cache.put({f"key-{i}" for i in range(start, min(count, start + 10_000))}, entry)
cache.close()
"""
LOOK = """
import json, random, resource, sys, time
from jevper._cache import AnswerCache
path, count, lookups = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cache = AnswerCache(path)
draw = random.Random(7)
started = time.perf_counter()
for _ in range(lookups):
    assert cache.get(f"key-{draw.randrange(count)}") is not None
took = time.perf_counter() - started
print(json.dumps({"seconds": took, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _lookups(folder: Path, kept: dict[str, Any]) -> dict[str, float]:
    path = folder / "million.sqlite"
    subprocess.run([sys.executable, "-c", FILL, str(path), str(LOOKUPS), json.dumps(kept)], check=True)
    runs = {}
    for lookups in (LOOKUPS // 10, LOOKUPS):
        done = subprocess.run(
            [sys.executable, "-c", LOOK, str(path), str(LOOKUPS), str(lookups)],
            check=True,
            capture_output=True,
            text=True,
        )
        runs[lookups] = json.loads(done.stdout)
    return {
        "seconds": runs[LOOKUPS]["seconds"],
        "peak_mib": runs[LOOKUPS]["peak_kib"] / 1024,
        "peak_tenth_mib": runs[LOOKUPS // 10]["peak_kib"] / 1024,
        "file_mib": path.stat().st_size / 2**20,
    }


# --- the batch core on the server ----------------------------------------------------------------


async def _asked(classifier: BatchClassifier, states: list[str]) -> tuple[int, int]:
    """The requests the rows cost and the input tokens their answers report. A row of its own is asked
    first: what a new classifier asks once before its first answer (the model list, under api="auto")
    is not the rows' cost."""
    pool = classifier._upstreams()
    try:
        await classifier.ask_once(pool, ticket(-2))
        before = classifier.requests_sent
        rows = await asyncio.gather(*(classifier.ask_once(pool, state) for state in states))
    finally:
        await classifier.aclose()
    assert all(row.error is None for row in rows), [row.error for row in rows if row.error]
    return classifier.requests_sent - before, sum(row.input_tokens or 0 for row in rows)


async def _batch_figures(server: Server, folder: Path) -> dict[str, Any]:
    cache = folder / "batch.sqlite"
    distinct = [ticket(100 + i) for i in range(ROWS)]
    halves = [ticket(200 + i // 2) for i in range(ROWS)]  # every state twice: 50% duplicates
    questions = {qid: q for qid, q in QUESTIONS.items()}
    first, _ = await _asked(BatchClassifier(questions, [server], cache=cache), distinct)
    rerun_classifier = BatchClassifier(questions, [server], cache=cache)
    rerun, _ = await _asked(rerun_classifier, distinct)  # its first row too is answered from the file
    plain, tokens = await _asked(BatchClassifier(questions, [server]), distinct)
    duplicated_classifier = BatchClassifier(questions, [server])
    duplicated, _ = await _asked(duplicated_classifier, halves)
    priced = BatchClassifier(questions, [server])
    try:
        previewed = await preview(priced, distinct, sample=False)
    finally:
        await priced.aclose()
    return {
        "first": first,
        "rerun": rerun,
        "rerun_hits": rerun_classifier.cache_hits,
        "plain": plain,
        "duplicated": duplicated,
        "duplicates": duplicated_classifier.duplicates,
        "reported_tokens": tokens,
        "dry_tokens": previewed.prompt_tokens,
        "dry_counted": previewed.counted,
        "dry_requests": sum(previewed.requests.values()),
    }


def run() -> Section:
    key, title, command = SECTION
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        with spawn_llamacpp(extra_args=slot_args(SLOTS)) as spawned:
            client = asyncio.run(_client_figures(spawned.base_url, spawned.model, folder))
            load_client = load_average()
            server = Server(spawned.base_url, spawned.model, slots=SLOTS)
            batch = asyncio.run(_batch_figures(server, folder))
            load_batch = load_average()
            kept = AnswerCache(str(folder / "client.sqlite"))
            sample = next(iter(_entries(kept)))
            kept.close()
        lookups = _lookups(folder, sample)
        load_lookups = load_average()
    miss_share = client["miss"] / client["asked"]
    speedup = client["asked"] / client["hit"]
    token_error = abs(batch["dry_tokens"] - batch["reported_tokens"]) / batch["reported_tokens"]
    halved = batch["duplicated"] / batch["plain"]
    bounded = lookups["peak_mib"] / lookups["peak_tenth_mib"]
    figures = [
        Figure(
            "answer cache: a miss's overhead, share of the server's time per question",
            miss_share * 100,
            "%",
            f"≤ {MAX_MISS_SHARE:.0%}",
            miss_share <= MAX_MISS_SHARE,
            load_client,
            f"{client['miss'] * 1e3:.3f} ms of key, lookup and write per missed call against "
            f"{client['asked'] * 1e3:.0f} ms per question asked (median of {ASKED_CALLS})",
        ),
        Figure(
            "answer cache: a hit against asking",
            speedup,
            "x",
            f"≥ {MIN_HIT_SPEEDUP:.0f}x",
            speedup >= MIN_HIT_SPEEDUP,
            load_client,
            f"a hit {client['hit'] * 1e3:.2f} ms (the async client, the lookup on a worker thread), "
            f"asking {client['asked'] * 1e3:.0f} ms (medians of {ASKED_CALLS})",
        ),
        Figure(
            "answer cache: 1M lookups, peak memory against 100k lookups",
            bounded,
            "x",
            "≤ 1.1x (bounded)",
            bounded <= 1.1,
            load_lookups,
            f"{LOOKUPS:,} random lookups in a {lookups['file_mib']:.0f} MiB file of {LOOKUPS:,} entries: "
            f"{lookups['seconds']:.1f} s ({LOOKUPS / lookups['seconds']:,.0f}/s), peak RSS "
            f"{lookups['peak_mib']:.0f} MiB (after 100k: {lookups['peak_tenth_mib']:.0f} MiB)",
        ),
        Figure(
            "batch: a finished batch asked again with the cache, requests sent",
            float(batch["rerun"]),
            "requests",
            "0",
            batch["rerun"] == 0,
            load_batch,
            f"{ROWS} distinct rows: {batch['first']} requests the first time, {batch['rerun']} the second "
            f"({batch['rerun_hits'] - 1} rows answered from the cache)",
        ),
        Figure(
            "batch: rows 50% duplicates, requests against as many distinct rows",
            halved,
            "x",
            "0.5x",
            batch["duplicated"] * 2 == batch["plain"],
            load_batch,
            f"{ROWS} rows, each state twice: {batch['duplicated']} requests ({batch['duplicates']} rows "
            f"answered as their first); {ROWS} distinct rows: {batch['plain']} requests",
        ),
        Figure(
            "dry run: prompt tokens against what the real run reports",
            token_error * 100,
            "%",
            f"≤ {MAX_TOKEN_ERROR:.0%}",
            token_error <= MAX_TOKEN_ERROR and batch["dry_counted"],
            load_batch,
            f"{ROWS} rows: the dry run counted {batch['dry_tokens']} prompt tokens with the server's "
            f"/tokenize ({batch['dry_requests']} requests), the run's answers report "
            f"{batch['reported_tokens']}",
        ),
    ]
    notes = [
        f"llama.cpp {DEFAULT_RELEASE} with the embedded SmolLM2 (`slot_args({SLOTS})`), one Choice of three "
        "options asked with the clients' defaults (method and surface auto). The miss's overhead is the "
        "cache's own work timed around it (the key, the lookup that misses, the write under its two keys, "
        "in one SQLite transaction, WAL, synchronous=NORMAL), because a difference of whole calls with and "
        "without the cache is smaller than the server's own spread. The 1M lookups run in processes of "
        "their own, so their peak resident memory is the cache's and the interpreter's alone.",
        "The batch figures use the batch core (`BatchClassifier.ask_once`, what every engine calls per "
        "row) and count the HTTP requests its connections sent for the rows, after a first row of each "
        "classifier's own (what a new classifier asks once, the model list under api=auto, is not a row's "
        "cost); the dry run is `jevper.batch._dry.preview` "
        "with `--dry-run=count`'s settings (no sample asked).",
    ]
    return Section(key=key, title=title, command=command, figures=figures, notes=notes)


def _entries(cache: AnswerCache) -> list[dict[str, Any]]:
    """The entries a cache file holds (a real answer, to fill the million-entry file with)."""
    rows = cache._connection().execute("SELECT entry FROM answers LIMIT 1").fetchall()
    return [json.loads(text) for (text,) in rows]


if __name__ == "__main__":
    section = run()
    for figure in section.figures:
        print(figure.name, figure.shown(), figure.detail)
