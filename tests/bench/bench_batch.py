"""The batch engine (`python -m jevper.batch`) against the raw async SDK, side by side in one run.

- Rows/s over the instant server (its own process, answering every POST /v1/systemone with the System
  One body recorded from callo 0.3.1 over llama.cpp b11549): the local engine reading a Parquet file
  and writing one, against the openai SDK's own ``post()`` of the same bodies at the same concurrency,
  with no jevper at all (reading the same file). Each side runs in a process of its own, timed from
  after its imports to its last row; ``JEVPER_BENCH_ROWS`` (``scripts/bench batch --rows N``) sets the
  rows (100,000 by default).
- Peak memory: the engine's resident peak at those rows against a tenth of them.
- Two embedded llama.cpp servers (two slots each): the batch core over both against their combined
  ceiling, raw concurrent SDK calls of the very request bodies the core sent (captured on a first pass)
  split over the two servers, two at a time each. Alternating rounds; the faster of each side is kept.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from _loopback import instant_server
from _report import ROOT, Figure, Section, load_average

from jevper.batch import BatchClassifier, Server
from jevper.servers.llamacpp import spawn_llamacpp

RECORDED = ROOT / "tests" / "fixtures" / "client" / "systemone" / "callo_valid.json"
CONCURRENCY = 8
MIN_RATIO = 0.9
MAX_MEMORY = 1.2
STATES = [
    "I was charged twice for the same subscription this month.",
    "The app crashes whenever I open the settings page.",
    "Which plan includes priority support?",
    "Thanks, it works now.",
]
LLAMA_ROWS, LLAMA_SLOTS, LLAMA_ROUNDS = 32, 2, 2
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
#: The same requests with the openai SDK alone: each row's System One body, CONCURRENCY at a time; with
#: ``client`` as the sixth argument, through AsyncSystemOneClient (the client's share of the cost).
RAW = """
import asyncio, json, resource, sys, time
import openai, pyarrow.parquet as pq
path, url, model, questions_file, concurrency = sys.argv[1:6]
through_client = sys.argv[6:] == ["client"]
questions = json.load(open(questions_file))

async def main():
    sdk = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0)
    if through_client:
        from jevper import AsyncSystemOneClient
        client = AsyncSystemOneClient(sdk, model=model, api="systemone", max_concurrency=int(concurrency))
    batches = pq.ParquetFile(path).iter_batches(columns=["state"])
    states = (s for b in batches for s in b.column(0).to_pylist())
    answered = 0
    async def work():
        nonlocal answered
        for state in states:
            if through_client:
                answers = (await client.system_one(state=state, questions=questions)).answers
                answered += bool(answers)
                continue
            body = await sdk.post("/systemone", body={"model": model, "state": state, "questions": questions},
                                  cast_to=object)
            answered += bool(body["answers"])
    await asyncio.gather(*(work() for _ in range(int(concurrency))))
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
    with tempfile.TemporaryDirectory() as scratch:
        figures, notes = _instant(Path(scratch), rows)
        llama, llama_notes = _llamas()
    return Section(
        key="batch",
        title="Batch engine",
        command="scripts/bench batch" + (f" --rows {rows}" if rows != 100_000 else ""),
        figures=[*figures, *llama],
        notes=[*notes, *llama_notes],
    )


# --- the instant server ---------------------------------------------------------------------------


def _instant(scratch: Path, rows: int) -> tuple[list[Figure], list[str]]:
    recorded = json.loads(RECORDED.read_text())
    questions = recorded["request"]["body"]["questions"]
    model = recorded["request"]["body"]["model"]
    body = json.dumps(json.loads(recorded["body"]), separators=(",", ":")).encode()
    (scratch / "q.json").write_text(json.dumps(questions))
    small = max(1, rows // 10)
    for n in (rows, small):
        pq.write_table(_table(n), scratch / f"in-{n}.parquet")
    with instant_server(body, scratch) as server:
        raw_args = (str(scratch / f"in-{rows}.parquet"), server.base_url, model, str(scratch / "q.json"))
        raw = _process(RAW, *raw_args, str(CONCURRENCY))
        engine = _engine(scratch, rows, server.base_url, model)
        raw_again = _process(RAW, *raw_args, str(CONCURRENCY))
        engine_again = _engine(scratch, rows, server.base_url, model)
        client = _process(RAW, *raw_args, str(CONCURRENCY), "client")
        engine_small = _engine(scratch, small, server.base_url, model)
    raw_rate = rows / min(raw["seconds"], raw_again["seconds"])
    engine_rate = rows / min(engine["seconds"], engine_again["seconds"])
    ratio = engine_rate / raw_rate
    peak = max(engine["peak_kib"], engine_again["peak_kib"]) / 1024
    peak_small = engine_small["peak_kib"] / 1024
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
            f"{rows / client['seconds']:.0f} rows/s; CPU per row: engine {_per_row(engine, rows)} ms, raw "
            f"{_per_row(raw, rows)} ms, client {_per_row(client, rows)} ms; {CONCURRENCY} in flight",
        ),
        Figure(
            f"batch peak memory, {rows:,} vs {small:,} rows",
            peak / peak_small,
            "x",
            f"<= {MAX_MEMORY}",
            peak / peak_small <= MAX_MEMORY,
            load,
            f"{peak:.0f} MiB vs {peak_small:.0f} MiB resident at peak "
            f"(raw SDK: {raw['peak_kib'] / 1024:.0f} MiB)",
        ),
    ]
    notes = [
        f"Instant server: the engine reads a Parquet file of {rows:,} rows (id, state) and writes one; "
        "the raw side reads the same states and posts each body with the openai SDK's own post(), keeping "
        "nothing.",
    ]
    return figures, notes


def _per_row(result: dict[str, Any], rows: int) -> str:
    return f"{1000 * result['cpu'] / rows:.2f}"


def _table(n: int) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(n), pa.int64()), "state": [STATES[i % len(STATES)] for i in range(n)]}
    )


def _engine(scratch: Path, rows: int, url: str, model: str) -> dict[str, Any]:
    out = scratch / f"out-{rows}-{time.monotonic_ns()}.parquet"
    result = _process(
        ENGINE, str(scratch / f"in-{rows}.parquet"), str(out), "--questions", str(scratch / "q.json"),
        "--server", url, "--model", model, "--api", "systemone", "--slots", str(CONCURRENCY), "--no-progress",
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


class _Capturing(BatchClassifier):
    """The core, keeping every request body it sends (for the raw side to send the same)."""

    sent: list[bytes]

    def _connect(self, server: Server) -> Any:
        from openai import AsyncOpenAI

        from jevper import AsyncSystemOneClient

        async def keep(request: httpx.Request) -> None:
            if request.method == "POST":
                self.sent.append(request.content)

        sdk = AsyncOpenAI(
            base_url=server.base_url,
            api_key="none",
            max_retries=0,
            http_client=httpx.AsyncClient(event_hooks={"request": [keep]}),
        )
        return AsyncSystemOneClient(
            sdk, model=server.model, max_concurrency=server.slots, **self.client_options
        )


def _llamas() -> tuple[list[Figure], list[str]]:
    args = ("--ctx-size", str(4096 * LLAMA_SLOTS), "-np", str(LLAMA_SLOTS), "--jinja")
    with spawn_llamacpp(extra_args=args) as a, spawn_llamacpp(extra_args=args) as b:
        servers = [Server(x.base_url, x.model, slots=LLAMA_SLOTS) for x in (a, b)]
        batch = pa.record_batch(
            {
                "id": list(range(LLAMA_ROWS)),
                "state": [STATES[i % len(STATES)] + f" (#{i})" for i in range(LLAMA_ROWS)],
            }
        )
        capturing = _Capturing(LLAMA_QUESTION, servers, api="chat_completions")
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
        "Two llama.cpp b11549 servers (SmolLM2-135M, two slots each) share the machine's two cores: the "
        "ceiling is what raw SDK calls of the same bodies reach over both, two at a time each."
    )
    return [figure], [note]


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
