"""The blocking client: ``SystemOneClient(client, model=...).system_one(state=..., questions=...)``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jevper import _seam
from jevper._call import (
    DEFAULT_TIMEOUT,
    Plan,
    assemble,
    checked_api,
    checked_examples,
    checked_extra_body,
    checked_method,
    checked_positive,
    checked_timeout,
    plan,
)
from jevper._engine import Outcome, Settings, Step, answer
from jevper._errors import InvalidQuestionError, ProviderError
from jevper._memory import Memory
from jevper._prompt import checked_cache_key
from jevper.models import Example, ReasoningConfig, State, SystemOneResponse
from jevper.questions import Question


class SystemOneClient:
    """Answers typed questions about a state with the model's own probability distribution.

    ``client`` is an ``openai.OpenAI``, an ``anthropic.Anthropic``, or any object with
    ``chat.completions.create``, ``responses.create`` or ``messages.create``. ``method`` chooses how the
    distribution is read (see the methods page), ``api`` which surface carries it; ``extra_body`` is
    merged into every request as given.
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
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidQuestionError(f"model: expected the server's model id, got {model!r}")
        self._client = client
        self._timeout = checked_timeout(timeout)
        self._max_concurrency = checked_positive("max_concurrency", max_concurrency)
        self._memory = Memory()
        self._settings = Settings(
            model=model,
            method=checked_method(method),
            api=checked_api(api),
            extra_body=checked_extra_body(extra_body),
            top_logprobs=checked_positive("top_logprobs", top_logprobs, minimum=2),
            normalize=bool(normalize_probabilities),
            examples=checked_examples(examples),
            prompt_cache_key=checked_cache_key(prompt_cache_key),
            reasoning=reasoning,
        )

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
    ) -> SystemOneResponse:
        """Ask every question about ``state``; answers come back keyed by question id, in order."""
        call = plan(
            self._settings,
            state=state,
            questions=questions,
            examples=examples,
            method=method,
            api=api,
            extra_body=extra_body,
            normalize_probabilities=normalize_probabilities,
            prompt_cache_key=prompt_cache_key,
            reasoning=reasoning,
        )
        workers = min(self._max_concurrency, len(call.questions))
        if workers <= 1:
            outcomes = [self._answer(call, qid, q) for qid, q in call.questions]
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                outcomes = list(pool.map(lambda item: self._answer(call, *item), call.questions))
        return assemble(call, outcomes, self._memory)

    def _answer(self, call: Plan, qid: str, question: Question) -> Outcome:
        steps = answer(question, call.state, call.settings, self._memory, qid)
        return self._drive(steps)

    def _drive(self, steps: Step) -> Outcome:
        try:
            request = next(steps)
            while True:
                try:
                    result = _seam.send(self._client, request.surface, request.request, self._timeout)
                except ProviderError as error:
                    request = steps.throw(error)
                else:
                    request = steps.send(result)
        except StopIteration as done:
            outcome: Outcome = done.value
            return outcome
