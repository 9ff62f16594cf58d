"""Async throughput: 64 questions through AsyncSystemOneClient against llama-server with 4 slots.

Three ways of sending the same 64 request bodies: one at a time through jevper (sequential), all in
one ``system_one`` call (jevper keeps up to ``max_concurrency`` in flight), and raw concurrent httpx
posts of the bodies jevper sent (the server's parallel ceiling). Each pass is run twice, alternating,
and the faster of the two is kept, so one burst of load from a neighbour does not decide the figure.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import openai
from _report import Figure, Section, load_average

from jevper import AsyncSystemOneClient, Choice
from jevper.servers.llamacpp import DEFAULT_RELEASE, spawn_llamacpp

QUESTIONS = 64
SLOTS = 4
CONCURRENCY = 8  # AsyncSystemOneClient's default max_concurrency
SERVE_ARGS = ("--ctx-size", "8192", "-np", str(SLOTS), "--jinja")
TARGET = 0.9
ROUNDS = 5
BUDGET_S = 40.0
STATE = "The app crashes every time I open the invoices page, and I was charged twice this month."
ASPECTS = ("intent", "urgency", "tone", "channel", "product", "sentiment", "risk", "effort")
LEVELS = ("low", "some", "high")


def questions() -> dict[str, Choice]:
    """64 ids for one three-option question. Distinct prompts made each pass's cache hits depend on
    which slot a request happened to land in (a 2x swing between identical passes on this CPU);
    one prompt, cached in every slot after the warm-up, gives every pass the same work to do."""
    criteria = {level: f"{level} urgency for the support team" for level in LEVELS}
    return {f"{ASPECTS[i % len(ASPECTS)]}-{i}": Choice(criteria=criteria) for i in range(QUESTIONS)}


def _recording_sdk(base_url: str, bodies: list[bytes]) -> openai.AsyncOpenAI:
    """An SDK client that keeps every request body it sends (the sequential pass only)."""

    async def keep(request: httpx2.Request) -> None:
        bodies.append(request.content)

    http = openai.DefaultAsyncHttpxClient(event_hooks={"request": [keep]})
    return openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, http_client=http)


@dataclass(frozen=True)
class _Pass:
    wall_s: float
    prompt_tokens: int
    cached_tokens: int


async def _raw(base_url: str, bodies: list[bytes], concurrency: int) -> _Pass:
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    usage: list[tuple[int, int]] = []
    async with httpx.AsyncClient(base_url=base_url + "/", timeout=120.0, limits=limits) as http:

        async def post(body: bytes) -> None:
            async with gate:
                reply = await http.post(
                    "chat/completions", content=body, headers={"content-type": "application/json"}
                )
                reply.raise_for_status()
                data = reply.json()
                usage.append((data["usage"]["prompt_tokens"], data["timings"]["cache_n"]))

        started = time.perf_counter()
        await asyncio.gather(*(post(b) for b in bodies))
        wall = time.perf_counter() - started
    return _Pass(wall, sum(p for p, _ in usage), sum(c for _, c in usage))


async def _sdk(sdk: openai.AsyncOpenAI, bodies: list[bytes], concurrency: int) -> _Pass:
    """The same bodies through the bare openai SDK: what any client built on it pays per request."""
    gate = asyncio.Semaphore(concurrency)
    sent = [json.loads(b) for b in bodies]
    usage: list[tuple[int, int]] = []

    async def create(body: dict[str, Any]) -> None:
        rest = dict(body)
        model, messages = rest.pop("model"), rest.pop("messages")
        async with gate:
            reply = await sdk.chat.completions.create(model=model, messages=messages, extra_body=rest)
        data = reply.model_dump()
        usage.append(
            (data["usage"]["prompt_tokens"], data["usage"]["prompt_tokens_details"]["cached_tokens"])
        )

    started = time.perf_counter()
    await asyncio.gather(*(create(b) for b in sent))
    wall = time.perf_counter() - started
    return _Pass(wall, sum(p for p, _ in usage), sum(c for _, c in usage))


async def _jevper(client: AsyncSystemOneClient, asked: dict[str, Choice]) -> _Pass:
    started = time.perf_counter()
    response = await client.system_one(state=STATE, questions=asked)
    wall = time.perf_counter() - started
    if len(response.answers) != QUESTIONS:
        raise RuntimeError(f"expected {QUESTIONS} answers, got {len(response.answers)}")
    return _Pass(wall, response.usage.input_tokens or 0, response.usage.cached_tokens or 0)


async def _sequential(client: AsyncSystemOneClient, asked: dict[str, Choice]) -> _Pass:
    started = time.perf_counter()
    prompt = cached = 0
    for qid, question in asked.items():
        response = await client.system_one(state=STATE, questions={qid: question})
        prompt += response.usage.input_tokens or 0
        cached += response.usage.cached_tokens or 0
    return _Pass(time.perf_counter() - started, prompt, cached)


RAW = f"raw httpx, {CONCURRENCY} in flight"
SDK = f"bare openai SDK, {CONCURRENCY} in flight"
JEVPER = f"jevper, one system_one call ({CONCURRENCY} in flight)"
SEQUENTIAL = "jevper, one question at a time"


async def _measure(base_url: str, model: str) -> tuple[dict[str, _Pass], int]:
    sdk = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    bodies: list[bytes] = []
    recording = _recording_sdk(base_url, bodies)
    kwargs: dict[str, Any] = {"model": model, "method": "grammar", "api": "chat_completions"}
    extra = {"max_tokens": 1, "temperature": 0}
    asked = questions()
    capture = AsyncSystemOneClient(recording, extra_body=extra, max_concurrency=CONCURRENCY, **kwargs)
    client = AsyncSystemOneClient(sdk, extra_body=extra, max_concurrency=CONCURRENCY, **kwargs)

    # The capture pass also warms every slot's cache, so no measured pass starts colder than another.
    await _jevper(capture, asked)
    await recording.close()
    runs: dict[str, Callable[[], Awaitable[_Pass]]] = {
        RAW: lambda: _raw(base_url, bodies, CONCURRENCY),
        SDK: lambda: _sdk(sdk, bodies, CONCURRENCY),
        JEVPER: lambda: _jevper(client, asked),
        SEQUENTIAL: lambda: _sequential(client, asked),
    }
    # Rounds alternate the order of the passes, up to ROUNDS or the time budget, whichever comes
    # first; each pass keeps its fastest run, the best the machine allowed it.
    passes: dict[str, _Pass] = {}
    started = time.perf_counter()
    for i in range(ROUNDS):
        order = (RAW, SDK, JEVPER, SEQUENTIAL) if i % 2 == 0 else (SEQUENTIAL, JEVPER, SDK, RAW)
        for name in order:
            done = await runs[name]()
            if name not in passes or done.wall_s < passes[name].wall_s:
                passes[name] = done
        if time.perf_counter() - started > BUDGET_S:
            break
    await sdk.close()
    return passes, len(bodies)


def run() -> Section:
    with spawn_llamacpp(extra_args=SERVE_ARGS) as server:
        load_before = load_average()
        passes, requests = asyncio.run(_measure(server.base_url, server.model))
    jevper, sequential, ceiling = passes[JEVPER].wall_s, passes[SEQUENTIAL].wall_s, passes[RAW].wall_s
    ratio = ceiling / jevper
    sdk_ratio = passes[SDK].wall_s / jevper
    load = load_average()
    table = [["Pass", "Wall time", "Requests per second", "Prompt tokens", "of which cached"]]
    table += [
        [name, f"{p.wall_s:.2f} s", f"{requests / p.wall_s:.1f}", str(p.prompt_tokens), str(p.cached_tokens)]
        for name, p in passes.items()
    ]
    return Section(
        key="throughput",
        title="Async throughput",
        command="scripts/bench throughput",
        figures=[
            Figure(
                "async throughput ÷ the server's parallel ceiling",
                ratio,
                "x",
                f"≥ {TARGET}x",
                ratio >= TARGET,
                load,
                f"jevper {requests / jevper:.1f} requests/s against the raw ceiling's "
                f"{requests / ceiling:.1f} (raw httpx, {CONCURRENCY} in flight); load "
                f"average {' / '.join(map(str, load_before))} before the passes",
            ),
            Figure(
                "async throughput ÷ the bare openai SDK's, same concurrency",
                sdk_ratio,
                "x",
                "",
                None,
                load,
                f"the bare SDK {requests / passes[SDK].wall_s:.1f} requests/s; on two shared cores the "
                "client's own CPU per request (the SDK's, then jevper's) is taken from the server's",
            ),
            Figure(
                "async speed-up over one question at a time",
                sequential / jevper,
                "x",
                "",
                None,
                load,
                f"{sequential:.2f} s one at a time, {jevper:.2f} s concurrently",
            ),
        ],
        table=table,
        notes=[
            f"llama.cpp {DEFAULT_RELEASE} with `{' '.join(SERVE_ARGS)}` (4 slots) serving SmolLM2-135M "
            "on the "
            f"CPU; one three-option question about one state under {QUESTIONS} ids, "
            "`method='grammar'` (the 135M "
            "model answers prose without it), `max_tokens: 1`, "
            f"{requests} requests per pass (a corrective retry, if any, is sent by every pass alike, "
            "since the raw passes replay the bodies jevper sent). An unmeasured jevper pass captures "
            "those bodies and warms every slot first; the measured passes then run in up to "
            f"{ROUNDS} rounds of alternating order (fewer when {BUDGET_S:.0f} s have passed); the "
            "table keeps the fastest run of each. Prompt and cached tokens are the server's own counts, "
            "to show that every pass asked the server for the same work.",
        ],
    )


if __name__ == "__main__":
    section = run()
    for row in section.table:
        print(row)
    for figure in section.figures:
        print(figure.name, figure.shown(), figure.detail)
