"""The blocking client: ``SystemOneClient(client, model=...).system_one(state=..., questions=...)``."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from jevper import _seam
from jevper._call import DEFAULT_TIMEOUT, Plan, assemble, core, plan
from jevper._engine import Outcome, Step, answer
from jevper._errors import ProviderError
from jevper.models import Example, ReasoningConfig, State, SystemOneResponse
from jevper.questions import Question


class SystemOneClient:
    """Answers typed questions about a state with the model's own probability distribution.

    ``client`` is an ``openai.OpenAI``, an ``anthropic.Anthropic``, or any object with
    ``chat.completions.create``, ``responses.create`` or ``messages.create``. ``method`` chooses how the
    distribution is read (see the methods page), ``api`` which surface carries it; ``extra_body`` is
    merged into every request as given. ``prefill`` (Messages surface only) opens the JSON answer in a
    last assistant turn, so a server that ignores ``output_config`` still gets JSON; see the surfaces page.
    """

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
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def system_one(
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
        """Ask every question about ``state``; answers come back keyed by question id, in order."""
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
        workers = min(self._core.max_concurrency, len(call.questions))
        if workers <= 1:
            outcomes = [self._answer(call, qid, q) for qid, q in call.questions]
        else:
            futures = [self._executor().submit(self._answer, call, qid, q) for qid, q in call.questions]
            try:
                outcomes = [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                wait(futures)
                raise
        return assemble(call, outcomes, self._core.memory)

    def _executor(self) -> ThreadPoolExecutor:
        # One pool for the client's life: starting eight threads on every call made an 8-question
        # call 1.4x slower than eight bare SDK calls against a fast server (scripts/bench client).
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._core.max_concurrency, thread_name_prefix="jevper")
            return self._pool

    def _answer(self, call: Plan, qid: str, question: Question) -> Outcome:
        return self._drive(answer(question, call.state, call.settings, self._core.memory, qid))

    def _drive(self, steps: Step) -> Outcome:
        """Send each request the engine yields and hand it the result, until it returns the answer."""
        client, timeout = self._core.client, self._core.timeout
        try:
            request = next(steps)
            while True:
                try:
                    result = _seam.send(client, request.surface, request.request, timeout)
                except ProviderError as error:
                    request = steps.throw(error)
                else:
                    request = steps.send(result)
        except StopIteration as done:
            outcome: Outcome = done.value
            return outcome
