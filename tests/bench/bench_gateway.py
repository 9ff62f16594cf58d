"""The gateway (`python -m jevper.serve`) against calling the async client directly.

- Overhead per request, for each route: one one-question System One request through the gateway (in
  its own process) against the same question asked of ``AsyncSystemOneClient`` directly, and one
  one-question Decisions request (POST /v1/decisions) against the client's ``decisions.create``, both
  over the instant server (its own process) answering with the body recorded from llama.cpp b10434.
  Pairs alternate which side goes first; the figure is the median of the paired differences. The direct
  client asks through the openai SDK (the target), then through the gateway's own connection
  (jevper._http), whose figures leave the extra hop's cost alone.
- Throughput at the upstream's slot count: the embedded llama.cpp with 4 slots; 16 requests of 4
  questions each, all at once, through the gateway (`--concurrency 4`) against the same 16 calls of one
  async client (`max_concurrency=4`) made directly. The faster of two alternating runs is kept.
- Defaults against the best explicit setting and callo, side by side: three identical llama.cpp
  servers (callo's recipe: two slots of 4,096 tokens, /slots and /props), one behind the gateway with
  its defaults (no --api, no --method), one behind it with `--api chat_completions --method grammar`,
  one behind callo 0.3.1. Requests of three questions (a choice, a noul, a score), four at a time (the
  gateways' --limit-concurrency), in short alternating rounds; the gateway with defaults answers 200 of
  them, counted for 5xx, then runs alone at its limit for three minutes while its resident memory is
  read every half second (start after its first round, end, peak).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
from _loopback import instant_server, recorded_body
from _report import ROOT, Figure, Section, load_average, median_p90

from jevper import AsyncSystemOneClient, Choice
from jevper._http import HTTPClient
from jevper.servers.callo import UPSTREAM_ARGS as CALLO_UPSTREAM
from jevper.servers.callo import spawn_callo
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


#: The same question as OpenAI's Decisions API asks it: a choice of the same values, described alike.
DECISION = {
    "type": "choice",
    "instructions": "Which team handles case 0?",
    "choices": [{"value": value, "description": said} for value, said in CRITERIA.items()],
}
ROUTES = ("systemone", "decisions")


#: What the direct side's client asks the upstream through: the openai SDK (what a user hands the client;
#: the target's comparison), or the connection the gateway itself asks it through (jevper._http), which
#: shows what the extra hop costs on its own.
CONNECTIONS = ("openai", "own")


async def _overhead(
    upstream: str, gateway: str, route: str, connection: str = "openai"
) -> tuple[list[float], list[float]]:
    sdk: Any = (
        openai.AsyncOpenAI(base_url=upstream, api_key="bench", max_retries=0)
        if connection == "openai"
        else HTTPClient(upstream, "bench")
    )
    direct = AsyncSystemOneClient(sdk, model=MODEL, method="logprobs", api="chat_completions")
    body: dict[str, object] = {"state": STATE, "questions": {"q": _question(0)}}
    if route == "decisions":
        body = {"model": MODEL, "input": STATE, "questions": [DECISION]}
    asked = {"q": Choice(criteria=CRITERIA, instructions="Which team handles case 0?")}
    through: list[float] = []
    straight: list[float] = []
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:

        async def via_gateway() -> None:
            reply = await http.post(f"/v1/{route}", json=body)
            assert reply.status_code == 200, reply.text

        async def directly() -> None:
            if route == "decisions":
                await direct.decisions.create(input=STATE, questions=[DECISION])
            else:
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
        sdk,
        model=MODEL,
        method="grammar",
        api="chat_completions",
        max_concurrency=SLOTS,
        extra_body=BUDGET,
        timeout=300,
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


#: Side by side: requests of three questions, four at a time (the gateways' --limit-concurrency), in short
#: rounds that alternate (the machine is shared: a neighbour's load falls on every side alike).
ROUND, AT_ONCE, CYCLES, CALLO_EVERY = 8, 4, 25, 3
#: Then the gateway with its defaults alone at its limit this long, its resident memory read meanwhile.
MEMORY_S, SAMPLE_S = 180.0, 0.5
MIN_DEFAULTS_VS_BEST, MIN_DEFAULTS_VS_CALLO, MAX_GROWTH_MIB = 0.9, 2.0, 5.0
#: One compute thread per upstream: with two on a shared two-core machine a thread waits for a
#: descheduled peer (measured here: 30 rows at 0.57 rows/s with two at load 5, 4.0-4.9 with one).
ONE_THREAD = ("--threads", "1")
THREE = {
    "team": {"type": "choice", "instructions": "Which team should handle this?", "criteria": CRITERIA},
    "refund": {"type": "noul", "instructions": "Does the customer want money back?"},
    "urgency": {
        "type": "score",
        "instructions": "How urgent is it?",
        "criteria": ["can wait", "this week", "today"],
    },
}


@dataclass
class Side:
    name: str
    root: str
    seconds: float = 0.0
    answered: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    rates: list[float] = field(default_factory=list)  # per round

    @property
    def rate(self) -> float:
        return self.answered / self.seconds if self.seconds else 0.0

    def five_xx(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)


def _statuses(statuses: Counter[int]) -> dict[int, int]:
    return dict(sorted(statuses.items()))


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Sampler:
    """A process's resident memory, read every SAMPLE_S seconds on a thread of its own: (seconds, MiB)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._began = time.perf_counter()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - self._began, _rss_mib(self.pid)))
            self._stop.wait(SAMPLE_S)

    def mark(self) -> float:
        """Seconds since the sampler started (to cut the samples at a moment)."""
        return time.perf_counter() - self._began

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def _post_all(
    root: str, first: int, count: int | None, until: float | None, statuses: Counter[int]
) -> int:
    """Requests of three questions, AT_ONCE at a time: ``count`` of them, or as many as fit until
    ``until`` (perf_counter); each 200 must carry exactly its own question ids. Returns how many."""
    gate = asyncio.Semaphore(AT_ONCE)
    sent = 0
    async with httpx.AsyncClient(base_url=root, timeout=300) as http:

        async def one(i: int) -> None:
            ids = {f"{name}-{i}": q for name, q in THREE.items()}
            reply = await http.post("/v1/systemone", json={"state": f"{STATE} Ticket {i}.", "questions": ids})
            statuses[reply.status_code] += 1
            if reply.status_code == 200:
                assert set(reply.json()["answers"]) == set(ids), reply.text[:300]
            else:
                print(f"    {root} request {i}: {reply.status_code} {reply.text[:300]}", flush=True)

        async def worker() -> None:
            nonlocal sent
            while (count is None or sent < count) and (until is None or time.perf_counter() < until):
                sent += 1
                async with gate:
                    await one(first + sent)

        await asyncio.gather(*(worker() for _ in range(AT_ONCE)))
    return sent


def _round(side: Side, first: int) -> None:
    started = time.perf_counter()
    asyncio.run(_post_all(side.root, first, ROUND, None, side.statuses))
    took = time.perf_counter() - started
    side.seconds += took
    side.answered += ROUND
    side.rates.append(ROUND / took)
    print(f"    {side.name}: {ROUND / took:.2f} requests/s (load {load_average()[0]})", flush=True)


@dataclass
class Memory:
    samples: list[tuple[float, float]]
    warm_at: float  # seconds: after the first round, once start-up's allocations are done
    seconds: float  # at its limit, in all
    requests: int
    statuses: Counter[int]

    @property
    def warm(self) -> list[float]:
        return [mib for at, mib in self.samples if at >= self.warm_at]

    def start_end_peak(self) -> tuple[float, float, float]:
        warm = self.warm or [float("nan")]
        return warm[0], warm[-1], max(warm)


def _side_by_side() -> tuple[Side, Side, Side, Memory]:
    # A timeout no loaded machine reaches: a slow answer is counted in the rate, never as a 504.
    gateway_flags = ("--limit-concurrency", str(AT_ONCE), "--timeout", "300")
    best_flags = ("--method", "grammar", *gateway_flags)
    with (
        spawn_llamacpp(extra_args=(*CALLO_UPSTREAM, *ONE_THREAD)) as up_defaults,
        spawn_llamacpp(extra_args=(*CALLO_UPSTREAM, *ONE_THREAD)) as up_best,
        spawn_gateway(upstream=(up_defaults.base_url, MODEL), pool=2, options=gateway_flags) as defaults_gw,
        spawn_gateway(
            upstream=(up_best.base_url, MODEL), api="chat_completions", pool=2, options=best_flags
        ) as best_gw,
        spawn_callo(upstream_args=ONE_THREAD) as callo,
        Sampler(int(defaults_gw.extra["pid"])) as sampler,
    ):
        defaults = Side("defaults", defaults_gw.base_url.removesuffix("/v1"))
        best = Side("--api chat_completions --method grammar", best_gw.base_url.removesuffix("/v1"))
        callo_side = Side(f"callo {callo.version}", callo.base_url.removesuffix("/v1"))
        at_limit = 0.0
        warm_at = 0.0
        for k in range(CYCLES):
            order = [defaults, best] + ([callo_side] if k % CALLO_EVERY == 0 else [])
            shift = k % len(order)
            for side in order[shift:] + order[:shift]:  # each goes first in turn
                _round(side, k * ROUND)
                if side is defaults and not warm_at:
                    warm_at = sampler.mark()
        at_limit = defaults.seconds
        print(f"    defaults alone at --limit-concurrency {AT_ONCE} for {MEMORY_S:.0f} s ...", flush=True)
        statuses: Counter[int] = Counter()
        began = time.perf_counter()
        sent = asyncio.run(_post_all(defaults.root, 10**6, None, began + MEMORY_S, statuses))
        at_limit += time.perf_counter() - began
    memory = Memory(sampler.samples, warm_at, at_limit, sent, statuses)
    return defaults, best, callo_side, memory


def _overhead_figure(
    route: str, connection: str, through: list[float], straight: list[float], load_before: list[float]
) -> Figure:
    """The median of the paired differences on one route, with both sides' median and p90; the target
    holds against the client over the openai SDK, the other connection's figure is told beside it."""
    overhead_ms = statistics.median(a - b for a, b in zip(through, straight, strict=True)) * 1000
    g_med, g_p90 = median_p90(through)
    d_med, d_p90 = median_p90(straight)
    asked = "system_one()" if route == "systemone" else "decisions.create()"
    targeted = connection == "openai"
    over = "over the openai SDK" if targeted else "over the gateway's own connection (jevper._http)"
    return Figure(
        # The System One figure against the SDK keeps its name, so its history in performance.json reads on.
        "gateway overhead per request (median), against the async client directly"
        + ("" if route == "systemone" else f", POST /v1/{route}")
        + ("" if targeted else ", the client over the gateway's own connection"),
        overhead_ms,
        "ms",
        f"≤ {MAX_OVERHEAD_MS} ms" if targeted else "—",
        overhead_ms <= MAX_OVERHEAD_MS if targeted else None,
        load_average(),
        f"POST /v1/{route} through the gateway median {g_med * 1000:.3f} ms, p90 {g_p90 * 1000:.3f} ms; "
        f"the client's {asked} directly ({over}) median {d_med * 1000:.3f} ms, p90 {d_p90 * 1000:.3f} ms; "
        f"{PAIRS} pairs, one question each, over the instant server; load average "
        f"{' / '.join(map(str, load_before))} before",
    )


def run() -> Section:
    load_before = load_average()
    with (
        tempfile.TemporaryDirectory() as scratch,
        instant_server(recorded_body(CASSETTE), Path(scratch)) as up,
        _gateway(up.base_url, "--method", "logprobs") as gateway,
    ):
        pairs = {
            (route, connection): asyncio.run(_overhead(up.base_url, gateway, route, connection))
            for connection in CONNECTIONS
            for route in ROUTES
        }
    overhead_figures = [_overhead_figure(*key, *pairs[key], load_before) for key in pairs]
    serve_args = ("--ctx-size", str(4096 * SLOTS), "-np", str(SLOTS), "--jinja")
    flags = (
        "--api",
        "chat_completions",
        "--method",
        "grammar",
        "--concurrency",
        str(SLOTS),
        "--limit-concurrency",
        "64",
        "--timeout",
        "300",
    )
    flags += ("--extra-body", json.dumps(BUDGET))
    with spawn_llamacpp(extra_args=serve_args) as server, _gateway(server.base_url, *flags) as gateway:
        gateway_s, direct_s = asyncio.run(_throughput(server.base_url, gateway))
    ratio = direct_s / gateway_s
    load = load_average()
    questions = REQUESTS * PER_REQUEST
    defaults, best, callo, memory = _side_by_side()
    side_load = load_average()
    vs_best, vs_callo = defaults.rate / best.rate, defaults.rate / callo.rate
    # Rounds of one cycle ran back to back, under much the same load from the machine's other work.
    paired_best = statistics.median(d / b for d, b in zip(defaults.rates, best.rates, strict=True))
    with_callo = defaults.rates[::CALLO_EVERY]
    paired_callo = statistics.median(d / c for d, c in zip(with_callo, callo.rates, strict=True))
    start, end, peak = memory.start_end_peak()
    growth = end - start
    shown = "; ".join(
        f"{s.name} {s.rate:.2f} requests/s ({s.answered} requests, statuses {_statuses(s.statuses)}; "
        f"rounds {', '.join(f'{r:.2f}' for r in s.rates)})"
        for s in (defaults, best, callo)
    )
    every = sorted(mib for _, mib in memory.samples)
    return Section(
        key="gateway",
        title="Gateway (python -m jevper.serve)",
        command="scripts/bench gateway",
        figures=[
            *overhead_figures,
            Figure(
                f"gateway throughput ÷ the async client's, {SLOTS} slots",
                ratio,
                "x",
                f"≥ {MIN_THROUGHPUT}x",
                ratio >= MIN_THROUGHPUT,
                load,
                f"{questions} questions in {REQUESTS} requests: {questions / gateway_s:.1f} questions/s "
                f"through the gateway (--concurrency {SLOTS}), {questions / direct_s:.1f} directly "
                f"(max_concurrency={SLOTS}); the faster of two runs each",
            ),
            Figure(
                "gateway with its defaults ÷ the best explicit setting, requests/s",
                vs_best,
                "x",
                f"≥ {MIN_DEFAULTS_VS_BEST}x",
                vs_best >= MIN_DEFAULTS_VS_BEST,
                side_load,
                f"{shown}; the median of the cycles' paired ratios {paired_best:.3f}",
            ),
            Figure(
                "gateway with its defaults ÷ callo over the same kind of upstream, requests/s",
                vs_callo,
                "x",
                f"≥ {MIN_DEFAULTS_VS_CALLO}x",
                vs_callo >= MIN_DEFAULTS_VS_CALLO,
                side_load,
                f"{defaults.rate:.2f} against {callo.rate:.2f} requests/s of three questions, "
                f"{AT_ONCE} at a time, each over its own identical llama.cpp; the median of the paired "
                f"ratios of the cycles callo ran in {paired_callo:.3f}",
            ),
            Figure(
                f"5xx answers in {defaults.answered} requests of three questions, gateway defaults",
                defaults.five_xx(),
                "",
                "0",
                defaults.five_xx() == 0,
                side_load,
                f"statuses {_statuses(defaults.statuses)}; then {memory.requests} more alone at its limit: "
                f"statuses {_statuses(memory.statuses)}",
            ),
            Figure(
                "gateway resident memory at its in-flight limit: end ÷ start",
                end / start,
                "x",
                f"growth ≤ {MAX_GROWTH_MIB:g} MiB",
                growth <= MAX_GROWTH_MIB,
                side_load,
                f"start {start:.1f} MiB (after its first round of {ROUND}), end {end:.1f} MiB, peak "
                f"{peak:.1f} MiB, growth {growth:+.1f} MiB; {memory.seconds:.0f} s at --limit-concurrency "
                f"{AT_ONCE} with {AT_ONCE} at a time, {defaults.answered + memory.requests} requests; "
                f"{len(memory.samples)} samples every {SAMPLE_S:g} s (from {every[0]:.1f} MiB at start-up)",
            ),
        ],
        notes=[
            f"The overhead pairs: the gateway runs in its own process (Uvicorn, one worker), the instant "
            "server in another, the client in this one; a pair alternates which side goes first. The "
            "caller posts to the gateway with httpx. The gateway asks its upstream over its own aiohttp "
            "connection (jevper/_http.py), not the openai SDK: the target compares it with the client "
            "over the openai SDK (what a user hands it); the figures 'over the gateway's own connection' "
            "compare it with the client over that same connection, which leaves the extra hop's cost. The "
            f"throughput: the embedded llama.cpp with `{' '.join(serve_args)}`, `method='grammar'` and "
            "`max_tokens: 1` on both sides.",
            "Side by side: three identical llama.cpp b11549 servers "
            f"({' '.join((*CALLO_UPSTREAM, *ONE_THREAD))}, "
            "SmolLM2-135M), one behind each side: the gateway with its defaults, the gateway with "
            f"`--api chat_completions --method grammar` (both `--concurrency 2 --limit-concurrency "
            f"{AT_ONCE}`), and "
            f"callo (`--s1-slots 1`, its own environment). Rounds of {ROUND} requests of three questions "
            f"(a choice, a noul, a score), {AT_ONCE} at a time; {CYCLES} cycles, each a round of the "
            f"defaults and of the best setting (and of callo every {CALLO_EVERY}rd), in rotating order; a "
            "rate is requests over the seconds its rounds took. Then the defaults alone at their limit "
            f"for {MEMORY_S:.0f} s; its gateway's VmRSS read every {SAMPLE_S:g} s throughout.",
        ],
    )


if __name__ == "__main__":
    section = run()
    for figure in section.figures:
        print(figure.name, figure.shown(), figure.detail)
