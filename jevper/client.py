"""The blocking client: ``SystemOneClient(client, model=...).system_one(state=..., questions=...)``."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Unpack

from jevper import _transport
from jevper._client_base import BaseClient, Plan
from jevper._engine import Answered, Step, answer
from jevper._errors import ProviderError
from jevper._options import ClientOptions, Overrides
from jevper.models import State, SystemOneResponse
from jevper.questions import Question


class SystemOneClient(BaseClient):
    """Answers typed questions about a state with the model's own probability distribution.

    ``client`` is an ``openai.OpenAI``, an ``anthropic.Anthropic``, or any object with
    ``chat.completions.create``, ``responses.create`` or ``messages.create``. ``method`` chooses how the
    distribution is read (see the methods page), ``api`` which surface carries it; ``extra_body`` is
    merged into every request as given. ``prefill`` (Messages surface only) opens the JSON answer in a
    last assistant turn, so a server that ignores ``output_config`` still gets JSON; see the surfaces page.
    The options and their defaults: ``jevper._options.Options``.
    """

    def __init__(self, client: object, *, model: str, **options: Unpack[ClientOptions]) -> None:
        super().__init__(client, model=model, **options)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def system_one(
        self,
        *,
        state: State,
        questions: Mapping[str, Question | Mapping[str, Any]],
        **overrides: Unpack[Overrides],
    ) -> SystemOneResponse:
        """Ask every question about ``state``; answers come back keyed by question id, in order."""
        call = self._plan(state, questions, overrides)
        workers = min(call.options.max_concurrency, len(call.questions))
        if workers <= 1:
            answered = [self._answer(call, qid, q) for qid, q in call.questions]
        else:
            futures = [self._executor().submit(self._answer, call, qid, q) for qid, q in call.questions]
            try:
                answered = [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                wait(futures)
                raise
        return self._assemble(call, answered)

    def _executor(self) -> ThreadPoolExecutor:
        # One pool for the client's life: starting eight threads on every call made an 8-question
        # call 1.4x slower than eight bare SDK calls against a fast server (scripts/bench client).
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._options.max_concurrency, thread_name_prefix="jevper")
            return self._pool

    def _answer(self, call: Plan, qid: str, question: Question) -> Answered:
        return self._drive(answer(question, call.state, call.options, self._memory, qid))

    def _drive(self, steps: Step) -> Answered:
        """Send each request the engine yields and hand it the result, until it returns the answer."""
        client, timeout = self._client, self._options.timeout
        try:
            request = next(steps)
            while True:
                try:
                    result = _transport.send(client, request.surface, request.request, timeout)
                except ProviderError as error:
                    request = steps.throw(error)
                else:
                    request = steps.send(result)
        except StopIteration as done:
            answered: Answered = done.value
            return answered
