"""The dry run: what a batch would cost, before it is run.

Rows and distinct states are counted from the input, cache hits read from the cache without a request.
Each question of each distinct state left to ask is built as the run would send it, caught before it
leaves (a client over ``_Catching``), and its prompt counted by the server's own tokenizer where it has
one (llama.cpp: POST /apply-template, then POST /tokenize); elsewhere its text is estimated at
CHARACTERS_PER_TOKEN, and the figure says so. The time is measured, not guessed: a small sample of
rows is asked for real (and said to be), and the rest priced at its rate. ``--dry-run=count`` sends no
question at all, so it gives no time.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jevper import AsyncSystemOneClient, JevperError
from jevper._http import HTTPClient, Response, StatusError
from jevper.batch._core import BatchClassifier, _json_key
from jevper.questions import Choice

#: A rough rule for text in English, used only where the server cannot count (and the figure says so).
CHARACTERS_PER_TOKEN = 4
#: How many rows the time is measured on, at most: enough to fill the servers' slots twice.
SAMPLE_ROWS = 16
#: The field of a chat request's turns, and of llama.cpp's POST /apply-template.
TURNS = "messages"


class _Caught(Exception):
    """A question's request, caught before it left."""

    def __init__(self, path: str, body: Mapping[str, Any]) -> None:
        super().__init__(path)
        self.path, self.body = path, body


class _Catching(HTTPClient):
    """The run's connection to a server, except that a question's request (every POST the client makes)
    is caught, not sent; the model list, which chooses a surface under ``api="auto"``, is asked for real."""

    async def send(
        self, method: str, path: str, body: Mapping[str, Any] | None, timeout: float | None
    ) -> Response:
        if method == "POST":
            raise _Caught(path, body or {})
        return await super().send(method, path, body, timeout)


@dataclass
class Preview:
    """What a run would do: its rows, what it would ask, of whom, at what size and in what time."""

    rows: int = 0
    distinct: int = 0
    hits: int = 0
    #: the requests each server would be sent (by its URL as messages name it), split by slots
    requests: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    #: True: every prompt counted by the server's tokenizer; False: some or all estimated
    counted: bool = True
    sample_rows: int = 0
    sample_seconds: float = 0.0
    sample_requests: int = 0
    seconds: float | None = None

    @property
    def to_ask(self) -> int:
        return self.distinct - self.hits

    def lines(self, prog: str) -> list[str]:
        asked = sum(self.requests.values())
        per_server = ", ".join(f"{url} {n}" for url, n in self.requests.items())
        tokens = (
            "0 prompt tokens: nothing to ask"
            if not self.to_ask
            else f"{self.prompt_tokens} prompt tokens, counted by the server's tokenizer (/tokenize)"
            if self.counted
            else f"about {self.prompt_tokens} prompt tokens: an estimate ({CHARACTERS_PER_TOKEN} characters "
            "a token), since the server counts none (no /tokenize)"
        )
        if self.seconds is None:
            timing = "time: not measured (--dry-run=count asks no question)"
        else:
            rate = self.sample_rows / self.sample_seconds if self.sample_seconds > 0 else 0.0
            timing = (
                f"time: about {self.seconds:.0f} s for the {self.to_ask - self.sample_rows} rows left, at "
                f"the sample's {rate:.2f} rows/s; the sample cost {self.sample_rows} rows, "
                f"{self.sample_requests} requests and {self.sample_seconds:.1f} s (its answers go to the "
                "cache, if one is given, and nowhere else)"
            )
        return [
            f"{prog}: dry run: {self.rows} rows, {self.distinct} distinct, {self.hits} answered from the "
            f"cache, {self.to_ask} to ask",
            f"{prog}: {asked} requests it would send ({per_server})",
            f"{prog}: {tokens}",
            f"{prog}: {timing}",
        ]


async def preview(classifier: BatchClassifier, states: Sequence[Any], *, sample: bool) -> Preview:
    """The preview of asking ``states``; with ``sample``, a few rows are asked to time the rest."""
    found = Preview(rows=len(states))
    distinct: dict[str, Any] = {}
    for state in states:
        distinct.setdefault(_json_key(state), state)
    found.distinct = len(distinct)
    servers = classifier.servers
    catching = [_Catching(s.base_url, s.api_key) for s in servers]
    options = {**classifier.client_options, "max_concurrency": 1}
    clients = [
        AsyncSystemOneClient(sdk, **{**options, "model": s.model})
        for sdk, s in zip(catching, servers, strict=True)
    ]
    questions = dict(classifier.questions)
    left = [
        state
        for state in distinct.values()
        if not any(c.cached(state=state, questions=questions) is not None for c in clients)
    ]
    found.hits = found.distinct - len(left)
    tokenizer = _Tokenizer(servers[0].base_url, servers[0].api_key)
    try:
        requests, tokens, counted = 0, 0, True
        gate = asyncio.Semaphore(max(1, servers[0].slots))

        async def priced(state: Any) -> tuple[int, int, bool]:
            async with gate:
                return await _priced(clients[0], tokenizer, state, questions)

        for n, t, c in await asyncio.gather(*(priced(state) for state in left)):
            requests, tokens, counted = requests + n, tokens + t, counted and c
    finally:
        await tokenizer.close()
        for sdk in catching:
            await sdk.close()
    found.prompt_tokens, found.counted = tokens, counted
    slots = sum(s.slots for s in servers)
    shares = [requests * s.slots // slots for s in servers]
    shares[0] += requests - sum(shares)
    found.requests = {s.shown: n for s, n in zip(servers, shares, strict=True)}
    if sample and left:
        await _timed(classifier, found, left, requests)
    return found


async def _priced(
    client: AsyncSystemOneClient, tokenizer: _Tokenizer, state: Any, questions: Mapping[str, Any]
) -> tuple[int, int, bool]:
    """The requests one row would send and their prompt tokens (counted, or estimated: False)."""
    caught: list[tuple[_Caught, int]] = []
    for qid, question in questions.items():
        body = await _caught(client, state, {qid: question})
        if body.path == "/systemone":  # one request carries every question
            caught = [(await _caught(client, state, questions), 1)]
            break
        orders = client.options.option_orders if isinstance(question, Choice) else 1
        caught.append((body, orders))
    requests = tokens = 0
    counted = True
    for body, orders in caught:
        n, exact = await tokenizer.count(body.path, body.body)
        requests, tokens, counted = requests + orders, tokens + n * orders, counted and exact
    return requests, tokens, counted


async def _caught(client: AsyncSystemOneClient, state: Any, questions: Mapping[str, Any]) -> _Caught:
    try:
        await client.system_one(state=state, questions=questions)
    except _Caught as caught:
        return caught
    except JevperError as error:
        if isinstance(error.__cause__, _Caught):
            return error.__cause__
        raise
    raise AssertionError("a question was answered without a request")  # pragma: no cover


async def _timed(classifier: BatchClassifier, found: Preview, left: Sequence[Any], requests: int) -> None:
    """Ask a sample of ``left`` for real, and price the rest at its rate."""
    chosen = list(left[: min(SAMPLE_ROWS, len(left))])
    before = classifier.requests_sent
    started = time.perf_counter()
    pool = classifier._upstreams()
    await asyncio.gather(*(classifier.ask(pool, state) for state in chosen))
    found.sample_seconds = time.perf_counter() - started
    found.sample_rows = len(chosen)
    found.sample_requests = classifier.requests_sent - before
    rate = found.sample_rows / found.sample_seconds if found.sample_seconds > 0 else 0.0
    rest = found.to_ask - found.sample_rows
    found.seconds = rest / rate if rate > 0 else None


class _Tokenizer:
    """A server's own token count of a request's prompt, where it has a tokenizer (llama.cpp's routes at
    its root); after the first refusal every count is an estimate."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        root = base_url.rstrip("/").removesuffix("/v1")
        self._http = HTTPClient(root, api_key)
        self._able: bool | None = None  # not known before the first count
        self._first = asyncio.Lock()

    async def count(self, path: str, body: Mapping[str, Any]) -> tuple[int, bool]:
        messages = _messages(path, body)
        if self._able is not False and messages is not None:
            if self._able is None:
                async with self._first:  # one probe of the server, not one per row in flight
                    if self._able is None:
                        counted = await self._counted(messages)
                        self._able = counted is not None
                        if counted is not None:
                            return counted, True
            if self._able:
                counted = await self._counted(messages)
                if counted is not None:
                    return counted, True
        text = json.dumps(messages if messages is not None else body, ensure_ascii=False)
        return max(1, len(text) // CHARACTERS_PER_TOKEN), False

    async def _counted(self, messages: list[Any]) -> int | None:
        """The tokens of the prompt the server makes of ``messages`` (its chat template applied), or None
        where it has no such routes."""
        try:
            prompt = (await self._json("/apply-template", {TURNS: messages}))["prompt"]
            tokens = (await self._json("/tokenize", {"content": prompt, "add_special": True}))["tokens"]
        except (StatusError, KeyError, TypeError, ValueError, ConnectionError):
            self._able = False
            return None
        return len(tokens)

    async def _json(self, path: str, body: Mapping[str, Any]) -> Any:
        response = await self._http.send("POST", path, body, 30.0)
        raw = bytearray()
        try:
            async for chunk in response.iter_bytes():
                raw += chunk
        finally:
            response.close()
        return json.loads(raw)

    async def close(self) -> None:
        await self._http.close()


def _messages(path: str, body: Mapping[str, Any]) -> list[Any] | None:
    """The chat turns of a question's request, as a chat template takes them: a Chat Completions body's
    messages, or a Responses body's message items (the portable form jevper sends: string content)."""
    turns = body.get(TURNS)
    if path == "/chat/completions" and isinstance(turns, list):
        return turns
    items = body.get("input")
    if path == "/responses" and isinstance(items, list):
        turns = [
            {"role": i.get("role"), "content": i.get("content")} for i in items if isinstance(i, Mapping)
        ]
        if all(isinstance(t["content"], str) for t in turns):
            return turns
    return None
