"""The gateway (`python -m jevper.serve`) against calling the async client directly.

- Overhead per request: one one-question System One request through the gateway (in its own process)
  against the same question asked of ``AsyncSystemOneClient`` directly, both over the instant server
  (its own process) answering with the body recorded from llama.cpp b10434. Pairs alternate which
  side goes first; the figure is the median of the paired differences.
- Throughput at the upstream's slot count: the embedded llama.cpp with 4 slots; 16 requests of 4
  questions each, all at once, through the gateway (`--pool 4`) against the same 16 calls of one
  async client (`max_concurrency=4`) made directly. The faster of two alternating runs is kept.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
from _loopback import instant_server, recorded_body
from _report import ROOT, Figure, Section, load_average, median_p90

from jevper import AsyncSystemOneClient, Choice
from jevper.servers.gateway import spawn_gateway
from jevper.servers.llamacpp import spawn_llamacpp

CASSETTE = ROOT / "tests" / "fixtures" / "providers" / "llamacpp-b10434" / "chat-logprobs.yaml"
MODEL = "smollm2"
STATE = "I was charged twice for the same subscription this month."
CRITERIA = {"billing": "money, invoices", "technical": "errors, crashes", "sales": "pricing, plans"}
SLOTS = 4
REQUESTS, PER_REQUEST = 16, 4
MAX_OVERHEAD_MS = 1.0
MIN_THROUGHPUT = 0.9
PAIRS = 300
#: Both sides bound the answer alike (the grammar ends it after one label anyway).
BUDGET = {"max_tokens": 1}


def _question(i: int) -> dict[str, object]:
    return {"type": "choice", "instructions": f"Which team handles case {i}?", "criteria": CRITERIA}


@contextmanager
def _gateway(upstream: str, *flags: str, pool: int = SLOTS) -> Iterator[str]:
    """jevper's gateway in its own process in front of `upstream`; yields its root URL."""
    with spawn_gateway(upstream=(upstream, MODEL), api="chat_completions", pool=pool, options=flags) as gw:
        yield gw.base_url.removesuffix("/v1")


async def _overhead(upstream: str, gateway: str) -> tuple[list[float], list[float]]:
    sdk = openai.AsyncOpenAI(base_url=upstream, api_key="bench", max_retries=0)
    direct = AsyncSystemOneClient(sdk, model=MODEL, method="logprobs", api="chat_completions")
    body = {"state": STATE, "questions": {"q": _question(0)}}
    asked = {"q": Choice(criteria=CRITERIA, instructions="Which team handles case 0?")}
    through: list[float] = []
    straight: list[float] = []
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:

        async def via_gateway() -> None:
            reply = await http.post("/v1/systemone", json=body)
            assert reply.status_code == 200, reply.text

        async def directly() -> None:
            await direct.system_one(state=STATE, questions=asked)

        for _ in range(30):  # warm-up: connections, imports
            await via_gateway()
            await directly()
        for k in range(PAIRS):
            first, second = (via_gateway, directly) if k % 2 else (directly, via_gateway)
            t0 = time.perf_counter()
            await first()
            t1 = time.perf_counter()
            await second()
            t2 = time.perf_counter()
            a, b = t1 - t0, t2 - t1
            through.append(a if first is via_gateway else b)
            straight.append(b if first is via_gateway else a)
    await sdk.close()
    return through, straight


async def _throughput(upstream: str, gateway: str) -> tuple[float, float]:
    sdk = openai.AsyncOpenAI(base_url=upstream, api_key="bench", max_retries=0)
    direct = AsyncSystemOneClient(
        sdk, model=MODEL, method="grammar", api="chat_completions", max_concurrency=SLOTS, extra_body=BUDGET
    )
    batches = [
        {f"r{r}q{q}": _question(r * PER_REQUEST + q) for q in range(PER_REQUEST)} for r in range(REQUESTS)
    ]

    async def via_gateway() -> float:
        async with httpx.AsyncClient(base_url=gateway, timeout=300) as http:
            started = time.perf_counter()
            replies = await asyncio.gather(
                *(http.post("/v1/systemone", json={"state": STATE, "questions": b}) for b in batches)
            )
            took = time.perf_counter() - started
        assert all(r.status_code == 200 for r in replies), [r.text for r in replies if r.status_code != 200]
        return took

    async def directly() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(direct.system_one(state=STATE, questions=b) for b in batches))
        return time.perf_counter() - started

    await directly()  # warm every slot's cache with the shared prefix
    runs: dict[str, list[float]] = {"gateway": [], "direct": []}
    for order in ((directly, via_gateway), (via_gateway, directly)):
        for run in order:
            runs["gateway" if run is via_gateway else "direct"].append(await run())
    await sdk.close()
    return min(runs["gateway"]), min(runs["direct"])


def run() -> Section:
    load_before = load_average()
    with (
        tempfile.TemporaryDirectory() as scratch,
        instant_server(recorded_body(CASSETTE), Path(scratch)) as up,
        _gateway(up.base_url, "--method", "logprobs") as gateway,
    ):
        through, straight = asyncio.run(_overhead(up.base_url, gateway))
    overhead_ms = statistics.median(a - b for a, b in zip(through, straight, strict=True)) * 1000
    g_med, g_p90 = median_p90(through)
    d_med, d_p90 = median_p90(straight)
    serve_args = ("--ctx-size", str(4096 * SLOTS), "-np", str(SLOTS), "--jinja")
    flags = (
        "--api",
        "chat_completions",
        "--method",
        "grammar",
        "--pool",
        str(SLOTS),
        "--max-in-flight",
        "64",
    )
    flags += ("--extra-body", json.dumps(BUDGET))
    with spawn_llamacpp(extra_args=serve_args) as server, _gateway(server.base_url, *flags) as gateway:
        gateway_s, direct_s = asyncio.run(_throughput(server.base_url, gateway))
    ratio = direct_s / gateway_s
    load = load_average()
    questions = REQUESTS * PER_REQUEST
    return Section(
        key="gateway",
        title="Gateway (python -m jevper.serve)",
        command="scripts/bench gateway",
        figures=[
            Figure(
                "gateway overhead per request (median), against the async client directly",
                overhead_ms,
                "ms",
                f"≤ {MAX_OVERHEAD_MS} ms",
                overhead_ms <= MAX_OVERHEAD_MS,
                load,
                f"through the gateway median {g_med * 1000:.3f} ms, p90 {g_p90 * 1000:.3f} ms; directly "
                f"median {d_med * 1000:.3f} ms, p90 {d_p90 * 1000:.3f} ms; {PAIRS} pairs, one question "
                f"each, over the instant server; load average {' / '.join(map(str, load_before))} before",
            ),
            Figure(
                f"gateway throughput ÷ the async client's, {SLOTS} slots",
                ratio,
                "x",
                f"≥ {MIN_THROUGHPUT}x",
                ratio >= MIN_THROUGHPUT,
                load,
                f"{questions} questions in {REQUESTS} requests: {questions / gateway_s:.1f} questions/s "
                f"through the gateway (--pool {SLOTS}), {questions / direct_s:.1f} directly "
                f"(max_concurrency={SLOTS}); the faster of two runs each",
            ),
        ],
        notes=[
            f"The overhead pairs: the gateway runs in its own process (Uvicorn, one worker), the instant "
            "server in another, the client in this one; a pair alternates which side goes first. The "
            f"throughput: the embedded llama.cpp with `{' '.join(serve_args)}`, `method='grammar'` and "
            "`max_tokens: 1` on both sides.",
        ],
    )


if __name__ == "__main__":
    section = run()
    for figure in section.figures:
        print(figure.name, figure.shown(), figure.detail)
