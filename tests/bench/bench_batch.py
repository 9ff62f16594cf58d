"""The batch engine (`python -m jevper.batch`) against the raw async SDK, side by side in one run.

- Rows/s over the instant server (its own process, answering every POST /v1/systemone with the System
  One body recorded from callo 0.3.1 over llama.cpp b11549). Both sides do the same work: each reads
  the same Parquet file of (id, state) rows, sends each row the very body the engine sends (the
  questions object as jevper sends it, read back from the server after a first request) at the same
  concurrency (CONCURRENCY requests in flight), and writes a Parquet file of each row's id and answers
  as it goes. The raw side is the openai SDK's own ``post()`` with no jevper at all, writing each
  row's ``answers`` as JSON text; the engine is the command line, writing its struct columns (and its
  journal and parts, which a resumed run needs). The async client alone over the engine's own
  connection (``jevper._http``), doing what the raw side does through
  ``AsyncSystemOneClient.system_one``, shows the client's and the connection's share. Each side runs
  in a process of its own, timed from after its imports to its output's close; the raw side and the
  engine alternate, twice each, and the faster run of each is kept. ``JEVPER_BENCH_ROWS``
  (``scripts/bench batch --rows N``) sets the rows (100,000 by default).
- Peak memory: the engine's resident peak at those rows against a tenth of them. With more than
  100,000 rows (``--rows 1000000``) only the memory pair runs (the engine at N and N/10, once each):
  the speed figures and the llama.cpp figure of the last run are kept as they were.
- Two embedded llama.cpp servers (two slots and one thread each): the batch core over both against their
  combined ceiling, raw concurrent SDK calls of the very request bodies the core sent (captured on a
  first pass) split over the two servers, two at a time each. Alternating rounds; the faster of each
  side is kept. ``JEVPER_BENCH_BATCH_PART=llama.cpp`` runs this figure alone and keeps the others.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from _capturing import Capturing
from _loopback import InstantServer, instant_server
from _report import ROOT, Figure, Section, load_average, with_part_anew

from jevper.batch import BatchClassifier, Server
from jevper.servers.llamacpp import spawn_llamacpp

RECORDED = ROOT / "tests" / "fixtures" / "client" / "systemone" / "callo_valid.json"
CONCURRENCY = 8
#: The report's section: its key, title and command.
SECTION = ("batch", "Batch engine", "scripts/bench batch")
MIN_RATIO = 0.9
MAX_MEMORY = 1.2
STATES = [
    "I was charged twice for the same subscription this month.",
    "The app crashes whenever I open the settings page.",
    "Which plan includes priority support?",
    "Thanks, it works now.",
]
LLAMA_ROWS, LLAMA_SLOTS, LLAMA_ROUNDS = 64, 2, 3
#: Each server on one thread: two servers of two threads on two cores spent their time waiting for a
#: descheduled thread, and the rounds of either side ranged from 2.6 to 5.6 rows/s.
LLAMA_ARGS = ("--ctx-size", str(4096 * LLAMA_SLOTS), "-np", str(LLAMA_SLOTS), "--jinja", "--threads", "1")
LLAMA_QUESTION = {
    "topic": {
        "type": "choice",
        "criteria": {"billing": "money, invoices", "technical": "errors, crashes", "sales": "pricing, plans"},
    }
}

#: The engine, timed from after its imports (both sides pay their SDK's import alike, outside the time).
ENGINE = """
import json, resource, sys, time
from jevper.batch.cli import main
import openai
started = time.perf_counter()
begun = resource.getrusage(resource.RUSAGE_SELF)
cpu0 = begun.ru_utime + begun.ru_stime
status = main(sys.argv[1:])
took = time.perf_counter() - started
used = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"status": status, "seconds": took, "cpu": used.ru_utime + used.ru_stime - cpu0,
                  "peak_kib": used.ru_maxrss}))
"""
#: The same requests with the openai SDK alone: each row's body as the engine sends it, CONCURRENCY at a
#: time, each row's id and answers written as it is done; with ``client`` as the seventh argument,
#: through AsyncSystemOneClient over the engine's own connection (jevper._http): the client's and
#: the connection's share of the engine's cost.
RAW = """
import asyncio, json, resource, sys, time
import openai, pyarrow as pa, pyarrow.parquet as pq
path, out, url, model, questions_file, concurrency = sys.argv[1:7]
through_client = sys.argv[7:] == ["client"]
if through_client:
    from jevper import AsyncSystemOneClient
    from jevper._http import HTTPClient
questions = json.load(open(questions_file))
schema = pa.schema([("id", pa.int64()), ("answers", pa.string())])

async def main():
    sdk = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0)
    if through_client:
        connection = HTTPClient(url)
        client = AsyncSystemOneClient(connection, model=model, api="systemone",
                                      max_concurrency=int(concurrency))
    batches = pq.ParquetFile(path).iter_batches(batch_size=1024, columns=["id", "state"])
    rows = ((i, s) for b in batches for i, s in zip(b.column(0).to_pylist(), b.column(1).to_pylist()))
    ids, texts = [], []
    answered = 0
    with pq.ParquetWriter(out, schema) as writer:
        def flush():
            writer.write_batch(pa.record_batch([pa.array(ids, pa.int64()), pa.array(texts, pa.string())],
                                               schema=schema))
            ids.clear(); texts.clear()
        async def work():
            nonlocal answered
            for row_id, state in rows:
                if through_client:
                    answers = (await client.system_one(state=state, questions=questions)).to_api()["answers"]
                else:
                    body = await sdk.post("/systemone", body={"model": model, "state": state,
                                          "questions": questions}, cast_to=object)
                    answers = body["answers"]
                answered += bool(answers)
                ids.append(row_id); texts.append(json.dumps(answers))
                if len(ids) >= 1024:
                    flush()
        await asyncio.gather(*(work() for _ in range(int(concurrency))))
        if ids:
            flush()
    if through_client:
        await connection.close()
    return answered

started = time.perf_counter()
begun = resource.getrusage(resource.RUSAGE_SELF)
answered = asyncio.run(main())
took = time.perf_counter() - started
used = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"answered": answered, "seconds": took,
                  "cpu": used.ru_utime + used.ru_stime - begun.ru_utime - begun.ru_stime,
                  "peak_kib": used.ru_maxrss}))
"""


def run() -> Section:
    rows = int(os.environ.get("JEVPER_BENCH_ROWS", "100000"))
    command = SECTION[2] + (f" --rows {rows}" if rows != 100_000 else "")
    if os.environ.get("JEVPER_BENCH_BATCH_PART") == "llama.cpp":
        return _llamas_only()
    with tempfile.TemporaryDirectory() as scratch:
        if rows > 100_000:
            return _memory_only(Path(scratch), rows, command)
        figures, notes = _instant(Path(scratch), rows)
        llama, llama_notes = _llamas()
    return Section(
        key=SECTION[0],
        title=SECTION[1],
        command=command,
        figures=[*figures, *llama],
        notes=[*notes, *llama_notes],
    )


# --- the instant server ---------------------------------------------------------------------------


def _prepared(scratch: Path, counts: tuple[int, ...]) -> tuple[str, bytes]:
    """The questions file and the inputs of ``counts`` rows; returns the model and the answer body."""
    recorded = json.loads(RECORDED.read_text())
    (scratch / "q.json").write_text(json.dumps(recorded["request"]["body"]["questions"]))
    for n in counts:
        pq.write_table(_table(n), scratch / f"in-{n}.parquet")
    body = json.dumps(json.loads(recorded["body"]), separators=(",", ":")).encode()
    return str(recorded["request"]["body"]["model"]), body


def _sent_questions(scratch: Path, server: InstantServer, model: str) -> Path:
    """The questions object as the engine sends it, read back from the server after one request."""
    from openai import AsyncOpenAI

    from jevper import AsyncSystemOneClient

    async def ask() -> None:
        sdk = AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        client = AsyncSystemOneClient(sdk, model=model, api="systemone")
        await client.system_one(state=STATES[0], questions=json.loads((scratch / "q.json").read_text()))
        await sdk.close()

    asyncio.run(ask())
    sent = scratch / "q-sent.json"
    sent.write_text(json.dumps(server.last_body()["questions"]))
    return sent


def _instant(scratch: Path, rows: int) -> tuple[list[Figure], list[str]]:
    small = max(1, rows // 10)
    model, body = _prepared(scratch, (rows, small))
    with instant_server(body, scratch) as server:
        sent = _sent_questions(scratch, server, model)
        raw_args = (
            str(scratch / f"in-{rows}.parquet"),
            str(scratch / "raw.parquet"),
            server.base_url,
            model,
            str(sent),
        )
        raw = _process(RAW, *raw_args, str(CONCURRENCY))
        engine = _engine(scratch, rows, server.base_url, model)
        raw_again = _process(RAW, *raw_args, str(CONCURRENCY))
        engine_again = _engine(scratch, rows, server.base_url, model)
        client = _process(RAW, *raw_args, str(CONCURRENCY), "client")
        engine_small = _engine(scratch, small, server.base_url, model)
    for result in (raw, raw_again, client):
        if result["answered"] != rows:
            raise RuntimeError(f"the raw side answered {result['answered']} rows of {rows}")
    raw_rate = rows / min(raw["seconds"], raw_again["seconds"])
    engine_rate = rows / min(engine["seconds"], engine_again["seconds"])
    ratio = engine_rate / raw_rate
    load = load_average()
    figures = [
        Figure(
            f"batch rows/s vs raw async SDK, instant server, {rows:,} rows",
            ratio,
            "x",
            f">= {MIN_RATIO}",
            ratio >= MIN_RATIO,
            load,
            f"engine {engine_rate:.0f} rows/s (runs {rows / engine['seconds']:.0f}, "
            f"{rows / engine_again['seconds']:.0f}), raw SDK {raw_rate:.0f} rows/s (runs "
            f"{rows / raw['seconds']:.0f}, {rows / raw_again['seconds']:.0f}), the async client alone "
            "over the engine's connection "
            f"{rows / client['seconds']:.0f} rows/s; CPU per row: engine {_per_row(engine, rows)} ms, raw "
            f"{_per_row(raw, rows)} ms, client {_per_row(client, rows)} ms; {CONCURRENCY} in flight",
        ),
        _memory_figure(rows, small, max(engine["peak_kib"], engine_again["peak_kib"]), engine_small, load),
    ]
    notes = [
        f"Instant server: both sides read a Parquet file of {rows:,} rows (id, state), send each row the "
        f"body the engine sends, {CONCURRENCY} in flight, and write a Parquet file of every row's id and "
        "answers; the raw side is the openai SDK's own post() and keeps each answer as JSON text, the "
        "engine also journals every row and commits a part per 1,024 rows (what --resume needs); the "
        "engine asks over connections of its own (jevper/_http.py), not the SDK.",
    ]
    return figures, notes


def _memory_figure(
    rows: int, small: int, peak_kib: int, engine_small: dict[str, Any], load: list[float]
) -> Figure:
    peak, peak_small = peak_kib / 1024, engine_small["peak_kib"] / 1024
    return Figure(
        f"batch peak memory, {rows:,} vs {small:,} rows",
        peak / peak_small,
        "x",
        f"<= {MAX_MEMORY}",
        peak / peak_small <= MAX_MEMORY,
        load,
        f"{peak:.0f} MiB vs {peak_small:.0f} MiB resident at peak",
    )


def _memory_only(scratch: Path, rows: int, command: str) -> Section:
    """The engine at ``rows`` and a tenth of them, once each; the last run's other figures are kept."""
    small = rows // 10
    model, body = _prepared(scratch, (rows, small))
    with instant_server(body, scratch) as server:
        big = _engine(scratch, rows, server.base_url, model)
        engine_small = _engine(scratch, small, server.base_url, model)
    figure = _memory_figure(rows, small, big["peak_kib"], engine_small, load_average())
    rate = rows / big["seconds"]
    detail = f"{figure.detail}; {rows:,} rows at {rate:.0f} rows/s, by `{command}`"
    memory = [replace(figure, detail=detail)]
    return with_part_anew(*SECTION[:2], command, memory, [], lambda name: name.startswith("batch peak"))


def _per_row(result: dict[str, Any], rows: int) -> str:
    return f"{1000 * result['cpu'] / rows:.2f}"


def _table(n: int) -> pa.Table:
    states = [STATES[i % len(STATES)] + f" (#{i})" for i in range(n)]
    return pa.table({"id": pa.array(range(n), pa.int64()), "state": states})


def _engine(scratch: Path, rows: int, url: str, model: str) -> dict[str, Any]:
    out = scratch / f"out-{rows}-{time.monotonic_ns()}.parquet"
    result = _process(
        ENGINE, str(scratch / f"in-{rows}.parquet"), str(out), "--questions", str(scratch / "q.json"),
        "--base-url", url, "--model", model, "--api", "systemone", "--concurrency", str(CONCURRENCY),
        "--no-progress",
    )  # fmt: skip
    if result["status"] != 0:
        raise RuntimeError(f"the engine exited {result['status']}")
    written = pq.ParquetFile(out).metadata.num_rows
    if written != rows:
        raise RuntimeError(f"the engine wrote {written} rows of {rows}")
    out.unlink()
    return result


def _process(code: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=3600
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"benchmark process failed: {done.stderr[-2000:]}")
    value: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return value


# --- two llama.cpp servers ------------------------------------------------------------------------


def _llamas() -> tuple[list[Figure], list[str]]:
    with spawn_llamacpp(extra_args=LLAMA_ARGS) as a, spawn_llamacpp(extra_args=LLAMA_ARGS) as b:
        servers = [Server(x.base_url, x.model, slots=LLAMA_SLOTS) for x in (a, b)]
        batch = pa.record_batch(
            {
                "id": list(range(LLAMA_ROWS)),
                "state": [STATES[i % len(STATES)] + f" (#{i})" for i in range(LLAMA_ROWS)],
            }
        )
        capturing = Capturing(LLAMA_QUESTION, servers, api="chat_completions")
        capturing.sent = []
        out = capturing.classify_sync(batch)
        capturing.close()
        answered = out.column("error").null_count
        bodies = [json.loads(body) for body in capturing.sent]
        core_runs, raw_runs = [], []
        for _ in range(LLAMA_ROUNDS):
            core_runs.append(_core_rate(servers, batch))
            raw_runs.append(_raw_rate(servers, bodies, LLAMA_ROWS))
    ratio = max(core_runs) / max(raw_runs)
    figure = Figure(
        "batch rows/s vs combined ceiling, two llama.cpp servers",
        ratio,
        "x",
        f">= {MIN_RATIO}",
        ratio >= MIN_RATIO,
        load_average(),
        f"core {max(core_runs):.2f} rows/s (runs {', '.join(f'{r:.2f}' for r in core_runs)}), raw "
        f"{max(raw_runs):.2f} rows/s (runs {', '.join(f'{r:.2f}' for r in raw_runs)}); "
        f"{LLAMA_ROWS} rows of one choice, {len(bodies)} requests sent for them, "
        f"{answered} answered on the first pass",
    )
    note = (
        "Two llama.cpp b11549 servers (SmolLM2-135M, two slots and one thread each) share the machine's two "
        "cores: the ceiling is what raw SDK calls of the same bodies reach over both, two at a time each."
    )
    return [figure], [note]


def _llamas_only() -> Section:
    """The two-llama.cpp figure alone (``JEVPER_BENCH_BATCH_PART=llama.cpp``); the instant server's
    figures of the last run are kept as they were."""
    figures, notes = _llamas()
    return with_part_anew(*SECTION, figures, notes, lambda name: "llama.cpp" in name)


def _core_rate(servers: list[Server], batch: pa.RecordBatch) -> float:
    core = BatchClassifier(LLAMA_QUESTION, servers, api="chat_completions")
    started = time.perf_counter()
    out = core.classify_sync(batch)
    took = time.perf_counter() - started
    core.close()
    if out.column("error").null_count != batch.num_rows:
        raise RuntimeError("the core left rows unanswered against llama.cpp")
    return batch.num_rows / took


def _raw_rate(servers: list[Server], bodies: list[dict[str, Any]], rows: int) -> float:
    from openai import AsyncOpenAI

    async def main() -> float:
        sdks = [AsyncOpenAI(base_url=s.base_url, api_key="none", max_retries=0) for s in servers]
        queue = iter(bodies)

        async def work(sdk: AsyncOpenAI) -> None:
            for body in queue:
                await sdk.post("/chat/completions", body=body, cast_to=object)

        started = time.perf_counter()
        await asyncio.gather(*(work(sdk) for sdk in sdks for _ in range(LLAMA_SLOTS)))
        took = time.perf_counter() - started
        for sdk in sdks:
            await sdk.close()
        return rows / took

    return asyncio.run(main())
