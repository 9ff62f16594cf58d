"""The gateway (`python -m jevper.serve`) against calling the async client directly.

- Overhead per request: one one-question System One request through the gateway (in its own process)
  against the same question asked of ``AsyncSystemOneClient`` directly, both over the instant server
  (its own process) answering with the body recorded from llama.cpp b10434. Pairs alternate which
  side goes first; the figure is the median of the paired differences.
- Throughput at the upstream's slot count: the embedded llama.cpp with 4 slots; 16 requests of 4
  questions each, all at once, through the gateway (`--pool 4`) against the same 16 calls of one
  async client (`max_concurrency=4`) made directly. The faster of two alternating runs is kept.
- Defaults against the best explicit setting and callo, side by side: three identical llama.cpp
  servers (callo's recipe: two slots of 4,096 tokens, /slots and /props), one behind the gateway with
  its defaults (no --api, no --method), one behind it with `--api chat_completions --method grammar`,
  one behind callo 0.3.1. Requests of three questions (a choice, a noul, a score), four at a time (the
  gateways' --max-in-flight), in alternating rounds; the gateway with defaults answers 200 of them in
  all, counted for 5xx, and its resident memory is read after each round.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
from _loopback import instant_server, recorded_body
from _report import ROOT, Figure, Section, load_average, median_p90

from jevper import AsyncSystemOneClient, Choice
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


#: Side by side: requests of three questions, four at a time; the defaults answer DEFAULT_ROUNDS rounds.
ROUND, AT_ONCE, DEFAULT_ROUNDS, OTHER_ROUNDS = 50, 4, 4, 2
MIN_DEFAULTS_VS_BEST, MIN_DEFAULTS_VS_CALLO = 0.9, 2.0
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
    pid: int | None = None
    seconds: float = 0.0
    answered: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    rss_mib: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.answered / self.seconds if self.seconds else 0.0

    def five_xx(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)


def _statuses(side: Side) -> dict[int, int]:
    return dict(sorted(side.statuses.items()))


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _round(side: Side, first: int) -> None:
    gate = asyncio.Semaphore(AT_ONCE)
    async with httpx.AsyncClient(base_url=side.root, timeout=300) as http:

        async def one(i: int) -> None:
            async with gate:
                body = {"state": f"{STATE} Ticket {i}.", "questions": THREE}
                reply = await http.post("/v1/systemone", json=body)
            side.statuses[reply.status_code] += 1

        started = time.perf_counter()
        await asyncio.gather(*(one(first + i) for i in range(ROUND)))
        side.seconds += time.perf_counter() - started
    side.answered += ROUND
    if side.pid is not None:
        side.rss_mib.append(_rss_mib(side.pid))


def _side_by_side() -> tuple[Side, Side, Side]:
    # A timeout no loaded machine reaches: a slow answer is counted in the rate, never as a 504.
    gateway_flags = ("--max-in-flight", str(AT_ONCE), "--timeout", "300")
    best_flags = ("--method", "grammar", *gateway_flags)
    with (
        spawn_llamacpp(extra_args=CALLO_UPSTREAM) as up_defaults,
        spawn_llamacpp(extra_args=CALLO_UPSTREAM) as up_best,
        spawn_gateway(upstream=(up_defaults.base_url, MODEL), pool=2, options=gateway_flags) as defaults_gw,
        spawn_gateway(
            upstream=(up_best.base_url, MODEL), api="chat_completions", pool=2, options=best_flags
        ) as best_gw,
        spawn_callo() as callo,
    ):
        defaults = Side("defaults", defaults_gw.base_url.removesuffix("/v1"), int(defaults_gw.extra["pid"]))
        best = Side("--api chat_completions --method grammar", best_gw.base_url.removesuffix("/v1"))
        callo_side = Side(f"callo {callo.version}", callo.base_url.removesuffix("/v1"))
        defaults.rss_mib.append(_rss_mib(int(defaults_gw.extra["pid"])))
        order = [defaults, best, callo_side]
        rounds = {defaults.name: DEFAULT_ROUNDS, best.name: OTHER_ROUNDS, callo_side.name: OTHER_ROUNDS}
        for k in range(DEFAULT_ROUNDS):
            for side in order[k % 3 :] + order[: k % 3]:  # each goes first in turn
                if k < rounds[side.name]:
                    asyncio.run(_round(side, k * ROUND))
    return defaults, best, callo_side


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
        "--timeout",
        "300",
    )
    flags += ("--extra-body", json.dumps(BUDGET))
    with spawn_llamacpp(extra_args=serve_args) as server, _gateway(server.base_url, *flags) as gateway:
        gateway_s, direct_s = asyncio.run(_throughput(server.base_url, gateway))
    ratio = direct_s / gateway_s
    load = load_average()
    questions = REQUESTS * PER_REQUEST
    defaults, best, callo = _side_by_side()
    side_load = load_average()
    vs_best, vs_callo = defaults.rate / best.rate, defaults.rate / callo.rate
    rss = defaults.rss_mib
    shown = "; ".join(
        f"{s.name} {s.rate:.2f} requests/s ({s.answered} requests, statuses {_statuses(s)})"
        for s in (defaults, best, callo)
    )
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
            Figure(
                "gateway with its defaults ÷ the best explicit setting, requests/s",
                vs_best,
                "x",
                f"≥ {MIN_DEFAULTS_VS_BEST}x",
                vs_best >= MIN_DEFAULTS_VS_BEST,
                side_load,
                shown,
            ),
            Figure(
                "gateway with its defaults ÷ callo over the same upstream, requests/s",
                vs_callo,
                "x",
                f"≥ {MIN_DEFAULTS_VS_CALLO}x",
                vs_callo >= MIN_DEFAULTS_VS_CALLO,
                side_load,
                f"{defaults.rate:.2f} against {callo.rate:.2f} requests/s of three questions, "
                f"{AT_ONCE} at a time",
            ),
            Figure(
                f"5xx answers in {defaults.answered} requests of three questions, gateway defaults",
                defaults.five_xx(),
                "",
                "0",
                defaults.five_xx() == 0,
                side_load,
                f"statuses {_statuses(defaults)}",
            ),
            Figure(
                "gateway resident memory, growth over the rounds at its in-flight limit",
                rss[-1] - rss[1] if len(rss) > 2 else float("nan"),
                "MiB",
                "≤ 5 MiB",
                len(rss) > 2 and rss[-1] - rss[1] <= 5,
                side_load,
                f"after start-up and after each round of {ROUND}: {', '.join(f'{m:.1f}' for m in rss)} MiB "
                f"({defaults.seconds:.0f} s at --max-in-flight {AT_ONCE} with {AT_ONCE} at a time)",
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
