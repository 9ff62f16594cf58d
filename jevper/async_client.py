"""The async client: the same API as ``SystemOneClient``, awaited; questions run concurrently."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Unpack

from jevper import _transport
from jevper._client_base import BaseClient, Plan
from jevper._engine import Answered, Step, answer
from jevper._errors import ProviderError
from jevper._options import Overrides
from jevper.models import State, SystemOneResponse
from jevper.questions import Question


class AsyncSystemOneClient(BaseClient):
    """``SystemOneClient`` for ``openai.AsyncOpenAI``, ``anthropic.AsyncAnthropic`` or any object whose
    ``create`` methods are coroutines. The questions of one call run concurrently, at most
    ``max_concurrency`` at a time; answers come back keyed by question id, in insertion order."""

    async def system_one(
        self,
        *,
        state: State,
        questions: Mapping[str, Question | Mapping[str, Any]],
        **overrides: Unpack[Overrides],
    ) -> SystemOneResponse:
        """Ask every question about ``state`` concurrently; answers keyed by question id, in order."""
        call = self._plan(state, questions, overrides)
        gate = asyncio.Semaphore(call.options.max_concurrency)
        tasks = [asyncio.ensure_future(self._answer(call, qid, q, gate)) for qid, q in call.questions]
        try:
            answered = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        return self._assemble(call, answered)

    async def _answer(self, call: Plan, qid: str, question: Question, gate: asyncio.Semaphore) -> Answered:
        async with gate:
            return await self._drive(answer(question, call.state, call.options, self._memory, qid))

    async def _drive(self, steps: Step) -> Answered:
        """The blocking client's loop, awaiting each request."""
        client, timeout = self._client, self._options.timeout
        try:
            request = next(steps)
            while True:
                try:
                    result = await _transport.send_async(client, request.surface, request.request, timeout)
                except ProviderError as error:
                    request = steps.throw(error)
                else:
                    request = steps.send(result)
        except StopIteration as done:
            answered: Answered = done.value
            return answered
