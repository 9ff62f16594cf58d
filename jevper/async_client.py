"""The async client: the same API as ``SystemOneClient``, awaited; questions run concurrently."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

from jevper import _escalate, _native, _routes, _transport
from jevper._calibrated import calibrated
from jevper._client_base import BaseClient, Plan, in_orders
from jevper._engine import Answered, Call, answer
from jevper._errors import JevperError
from jevper._options import ClientOptions, Overrides
from jevper._orders import folded
from jevper._usage import CALL, Tally
from jevper.decisions import call as _decisions
from jevper.decisions.answers import DecisionResponse
from jevper.models import ModelMetadata, State, SystemOneResponse
from jevper.questions import Question

R = TypeVar("R")
E = TypeVar("E")
T = TypeVar("T")


class AsyncSystemOneClient(BaseClient):
    """``SystemOneClient`` for ``openai.AsyncOpenAI``, ``anthropic.AsyncAnthropic`` or any object whose
    ``create`` methods are coroutines. The questions of a call run concurrently; at most
    ``max_concurrency`` requests of the client are in flight at a time, across concurrent calls (as the
    blocking client's one thread pool holds them); answers come back keyed by question id, in order.

    ``await client.aclose()``, or leaving ``async with AsyncSystemOneClient(...) as client:``, cancels
    the questions still running, waits until they have ended, and refuses further calls. It does not
    close ``client``: the SDK client is the caller's, may serve other code or other jevper clients, and
    is closed by its own ``close()`` or ``async with`` block."""

    def __init__(self, client: object, *, model: str, **options: Unpack[ClientOptions]) -> None:
        super().__init__(client, model=model, **options)
        self._check_escalation(AsyncSystemOneClient)
        # One GET /models per model; a lock per event loop, since a client may outlive asyncio.run().
        self._discovery: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        # The requests in flight, shared by every call of the client (the upstream's slots are shared).
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        # The questions running, of every call: aclose() ends them.
        self._running: set[asyncio.Task[Any]] = set()

    async def system_one(
        self,
        *,
        state: State,
        questions: Mapping[str, Question | Mapping[str, Any]],
        model: str | None = None,
        **overrides: Unpack[Overrides],
    ) -> SystemOneResponse:
        """Ask every question about ``state`` concurrently; answers keyed by question id, in order.
        ``model`` and every other override apply to this call alone."""
        tally = Tally()
        token = CALL.set(tally)
        try:
            call = self._plan(state, questions, overrides, model)
            escalation = call.options.escalate
            if escalation is not None:  # refused before any request
                _escalate.check_thresholds(
                    escalation.below, call.options.calibration, [q for q, _ in call.questions]
                )
            response = await self._off_loop(self._cached, call)
            if response is None:
                native = await self._natively(call)
                answered = (
                    native
                    if native is not None
                    else self._assemble(call, await self._in_orders(call, self._answer))
                )
                response = await self._off_loop(
                    self._kept, call, calibrated(call.options, call.questions, answered)
                )
            if escalation is not None:
                response = await self._escalated(state, call, response)
            return tally.stamped(response)
        finally:
            CALL.reset(token)

    async def _escalated(self, state: State, call: Plan, response: SystemOneResponse) -> SystemOneResponse:
        """The questions the first answers are unsure of asked again of ``escalate.to`` (only those, in one
        call); its failure is kept with the first answers, never raised."""
        verdicts, again = self._unsure(call, response)
        second: SystemOneResponse | Exception | None = None
        if again:
            to = call.options.escalate.to  # type: ignore[union-attr]  # set: the caller checked
            try:
                second = await to.system_one(state=state, questions=again)
            except Exception as failed:  # the first answer stands, the failure noted with its type
                second = failed
        return self._escalation_merged(call, response, verdicts, second)

    async def _off_loop(self, work: Callable[..., T], *args: Any) -> T:
        """``work`` (a read or write of the answer cache: SQLite, which may wait for another writer's
        lock or for the disk) on a worker thread, so the event loop runs on meanwhile; with no cache, at
        once."""
        if self._cache is None:
            return work(*args)
        return await asyncio.to_thread(work, *args)

    async def list_models(self) -> list[ModelMetadata]:
        """``SystemOneClient.list_models``, awaited."""
        self._check_open()
        return _native.listed(await self._fetch(_native.listing(self._options)))

    async def close(self) -> None:
        """``aclose()``, under the documented API's name."""
        await self.aclose()

    @property
    def decisions(self) -> AsyncDecisions:
        """OpenAI's Decisions API over this client: ``await decisions.create(input=..., questions=[...])``."""
        return AsyncDecisions(self)

    async def aclose(self) -> None:
        """Refuse further calls, cancel the questions still running on this event loop and wait until
        they have ended. The SDK client stays open. Calling it again does nothing."""
        self._closed = True
        loop = asyncio.get_running_loop()
        await _cancelled([task for task in self._running if task.get_loop() is loop])
        if self._cache is not None:
            self._cache.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _natively(self, call: Plan) -> SystemOneResponse | None:
        """The call answered by System One, or None for the prompt surfaces."""
        options, memory = call.options, self._memory
        if _native.discovers(options, memory):
            failures = memory.failed_discoveries(options.model)
            lock = self._discovery.setdefault(asyncio.get_running_loop(), asyncio.Lock())
            async with lock:
                await self._drive(_native.discover(options, memory, failures), self._fetch)
        return await self._drive(_native.answer(options, call.given, call.questions, memory), self._fetch)

    async def _fetch(self, request: _routes.Fetch) -> Mapping[str, Any]:
        return await _routes.fetch_async(self._client, request, self._options.sending)

    async def _each(
        self, call: Plan, work: Callable[[Plan, str, Question, asyncio.Semaphore], Awaitable[T]]
    ) -> list[T]:
        """``work`` for every question of the call, concurrently, within the client's gate; in order."""
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:  # made once per loop, not at every call as setdefault's argument would be
            gate = self._gates[loop] = asyncio.Semaphore(self._options.max_concurrency)
        tasks = [asyncio.ensure_future(work(call, qid, q, gate)) for qid, q in call.questions]
        self._running.update(tasks)
        for task in tasks:
            task.add_done_callback(self._running.discard)
        try:
            # One question (a batch row's usual call) is awaited as it is: gather costs a future more.
            return [await tasks[0]] if len(tasks) == 1 else list(await asyncio.gather(*tasks))
        except BaseException:
            # The other questions of a failed call end before the error leaves it: none keeps a request
            # or a slot of the gate past the call.
            await _cancelled(tasks)
            raise

    async def _in_orders(
        self, call: Plan, work: Callable[[Plan, str, Question, asyncio.Semaphore], Awaitable[Answered | E]]
    ) -> list[Answered | E]:
        """``work`` for every question of the call, a choice once per order of its options (option_orders),
        each choice's orders folded into one answer."""
        return folded(call.questions, await self._each(in_orders(call), work), call.options.option_orders)

    async def _answer(self, call: Plan, qid: str, question: Question, gate: asyncio.Semaphore) -> Answered:
        async with gate:
            steps = answer(question, call.state, call.options, self._memory, qid)
            return await self._drive(steps, lambda request: self._send(request, call.options.sending))

    async def _send(self, call: Call, sending: _transport.Sending) -> Any:
        return await _transport.send_async(
            self._client, call.surface, call.request, self._options.timeout, sending
        )

    @staticmethod
    async def _drive(steps: Generator[R, Any, T], send: Callable[[R], Awaitable[Any]]) -> T:
        """The blocking client's loop, awaiting each request."""
        try:
            request = next(steps)
            while True:
                try:
                    result = await send(request)
                except JevperError as error:
                    request = steps.throw(error)
                else:
                    request = steps.send(result)
        except StopIteration as done:
            returned: T = done.value
            return returned


async def _cancelled(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait until each has ended, its outcome retrieved (none is logged as lost)."""
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


class AsyncDecisions:
    """``AsyncSystemOneClient.decisions``: the blocking client's ``Decisions``, awaited; the questions run
    concurrently."""

    def __init__(self, client: AsyncSystemOneClient) -> None:
        self._client = client

    async def create(
        self,
        *,
        input: str | Sequence[Mapping[str, Any]],
        questions: Sequence[Mapping[str, Any]],
        model: str | None = None,
        instructions: str | Sequence[Mapping[str, Any]] | None = None,
        prompt_cache_options: Mapping[str, Any] | None = None,
        safety_identifier: str | None = None,
        **overrides: Unpack[Overrides],
    ) -> DecisionResponse:
        """``SystemOneClient.decisions.create``, awaited."""
        client = self._client
        client._check_open()
        steps = _decisions.create(
            client.options,
            client._memory,
            input=input,
            questions=questions,
            model=model,
            instructions=instructions,
            prompt_cache_options=prompt_cache_options,
            safety_identifier=safety_identifier,
            overrides=overrides,
        )
        return await client._drive(steps, self._step)

    async def _step(self, step: _decisions.Step) -> Any:
        client = self._client
        if isinstance(step, _decisions.AskEach):
            return await client._each(step.plan, self._question)
        if isinstance(step, _decisions.AskSystemOne):
            return await client._natively(step.plan)
        if isinstance(step, _decisions.LookUp):
            return await client._off_loop(client._looked_up, step.plan)
        if isinstance(step, _decisions.Keep):
            return await client._off_loop(client._stored, step.plan, step.entry)
        if isinstance(step, _decisions.AskAgain):
            return await self._asked_again(step)
        return await client._fetch(step)

    async def _asked_again(
        self, step: _decisions.AskAgain
    ) -> tuple[DecisionResponse | Exception | None, dict[str, Any]]:
        """The unsure questions asked of ``escalate.to``; its failure returned, never raised."""
        to = step.escalation.to
        servers = {"first": self._client._identity(step.model), "second": to._identity()}
        if step.asked is None:
            return None, servers
        try:
            return await to.decisions.create(**step.asked), servers
        except Exception as failed:  # the first answers stand, the failure noted with its type
            return failed, servers

    async def _question(
        self, plan: Plan, qid: str, question: Question, gate: asyncio.Semaphore
    ) -> Answered | _decisions.Refused:
        client = self._client
        async with gate:
            steps = _decisions.question(plan, qid, question, client._memory)
            return await client._drive(steps, lambda request: client._send(request, plan.options.sending))
