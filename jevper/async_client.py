"""The async client: the same API as ``SystemOneClient``, awaited; questions run concurrently."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from jevper import _seam
from jevper._call import DEFAULT_TIMEOUT, Plan, assemble, core, plan
from jevper._engine import Outcome, Step, answer
from jevper._errors import ProviderError
from jevper.models import Example, ReasoningConfig, State, SystemOneResponse
from jevper.questions import Question


class AsyncSystemOneClient:
    """``SystemOneClient`` for ``openai.AsyncOpenAI``, ``anthropic.AsyncAnthropic`` or any object whose
    ``create`` methods are coroutines. The questions of one call run concurrently, at most
    ``max_concurrency`` at a time; answers come back keyed by question id, in insertion order."""

    def __init__(
        self,
        client: object,
        *,
        model: str,
        method: str = "auto",
        api: str = "auto",
        extra_body: Mapping[str, Any] | None = None,
        top_logprobs: int = 20,
        max_concurrency: int = 8,
        normalize_probabilities: bool = True,
        examples: Sequence[Example] | None = None,
        prompt_cache_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        reasoning: ReasoningConfig | None = None,
        prefill: bool = True,
    ) -> None:
        self._core = core(
            client,
            model=model,
            method=method,
            api=api,
            extra_body=extra_body,
            top_logprobs=top_logprobs,
            max_concurrency=max_concurrency,
            normalize_probabilities=normalize_probabilities,
            examples=examples,
            prompt_cache_key=prompt_cache_key,
            timeout=timeout,
            reasoning=reasoning,
            prefill=prefill,
        )

    async def system_one(
        self,
        *,
        state: State,
        questions: Mapping[str, Question | Mapping[str, Any]],
        examples: Sequence[Example] | None = None,
        method: str | None = None,
        api: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        normalize_probabilities: bool | None = None,
        prompt_cache_key: str | None = None,
        reasoning: ReasoningConfig | None = None,
        prefill: bool | None = None,
    ) -> SystemOneResponse:
        """Ask every question about ``state`` concurrently; answers keyed by question id, in order."""
        call = plan(
            self._core.settings,
            state=state,
            questions=questions,
            examples=examples,
            method=method,
            api=api,
            extra_body=extra_body,
            normalize_probabilities=normalize_probabilities,
            prompt_cache_key=prompt_cache_key,
            reasoning=reasoning,
            prefill=prefill,
        )
        gate = asyncio.Semaphore(self._core.max_concurrency)
        tasks = [asyncio.ensure_future(self._answer(call, qid, q, gate)) for qid, q in call.questions]
        try:
            outcomes = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        return assemble(call, outcomes, self._core.memory)

    async def _answer(self, call: Plan, qid: str, question: Question, gate: asyncio.Semaphore) -> Outcome:
        async with gate:
            return await self._drive(answer(question, call.state, call.settings, self._core.memory, qid))

    async def _drive(self, steps: Step) -> Outcome:
        """The blocking client's loop, awaiting each request."""
        client, timeout = self._core.client, self._core.timeout
        try:
            request = next(steps)
            while True:
                try:
                    result = await _seam.send_async(client, request.surface, request.request, timeout)
                except ProviderError as error:
                    request = steps.throw(error)
                else:
                    request = steps.send(result)
        except StopIteration as done:
            outcome: Outcome = done.value
            return outcome
