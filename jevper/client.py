"""The blocking client: ``SystemOneClient(client, model=...).system_one(state=..., questions=...)``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

from jevper import _escalate, _native, _routes, _spread, _transport
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


class SystemOneClient(BaseClient):
    """Answers typed questions about a state with the model's own probability distribution.

    ``client`` is an ``openai.OpenAI``, an ``anthropic.Anthropic``, or any object with
    ``chat.completions.create``, ``responses.create`` or ``messages.create`` (and a generic ``post`` for
    System One). ``method`` chooses how the distribution is read (see the methods page), ``api`` which
    surface carries it: ``"systemone"`` asks every question of a call in one System One request, and
    ``"auto"`` does so for a model the server lists as a decision model (see the System One page).
    ``extra_body`` is merged into every request as given. ``prefill`` (Messages surface only) opens the
    JSON answer in a last assistant turn, so a server that ignores ``output_config`` still gets JSON; see
    the surfaces page. The options and their defaults: ``jevper._options.Options``.

    ``close()``, or leaving ``with SystemOneClient(...) as client:``, stops the client's worker threads
    (after the questions already running) and refuses further calls. It does not close ``client``: the
    SDK client is the caller's, may serve other code or other jevper clients, and is closed by its own
    ``close()`` or ``with`` block (``with OpenAI() as sdk, SystemOneClient(sdk, model=m) as client:``).
    """

    def __init__(self, client: object, *, model: str, **options: Unpack[ClientOptions]) -> None:
        super().__init__(client, model=model, **options)
        self._check_escalation(SystemOneClient)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        # One GET /models per model, also when several threads make their first call at once.
        self._discovery = threading.Lock()
        self._pace = _spread.Pace()  # whether the server makes this client's questions wait
        # max_concurrency holds across calls made at once: the callers' threads ask questions too.
        self._in_flight = threading.BoundedSemaphore(self._options.max_concurrency)

    def system_one(
        self,
        *,
        state: State,
        questions: Mapping[str, Question | Mapping[str, Any]],
        model: str | None = None,
        **overrides: Unpack[Overrides],
    ) -> SystemOneResponse:
        """Ask every question about ``state``; answers come back keyed by question id, in order. ``model``
        and every other override apply to this call alone."""
        tally = Tally()
        token = CALL.set(tally)
        try:
            call = self._plan(state, questions, overrides, model)
            escalation = call.options.escalate
            if escalation is not None:  # refused before any request
                _escalate.check_thresholds(
                    escalation.below, call.options.calibration, [q for q, _ in call.questions]
                )
            response = self._cached(call)
            if response is None:
                native = self._natively(call)
                answered = (
                    native
                    if native is not None
                    else self._assemble(call, self._in_orders(call, self._answer))
                )
                response = self._kept(call, calibrated(call.options, call.questions, answered))
            if escalation is not None:
                response = self._escalated(state, call, response)
            return tally.stamped(response)
        finally:
            CALL.reset(token)

    def _escalated(self, state: State, call: Plan, response: SystemOneResponse) -> SystemOneResponse:
        """The questions the first answers are unsure of asked again of ``escalate.to`` (only those, in one
        call); its failure is kept with the first answers, never raised."""
        verdicts, again = self._unsure(call, response)
        second: SystemOneResponse | Exception | None = None
        if again:
            to = call.options.escalate.to  # type: ignore[union-attr]  # set: the caller checked
            try:
                second = to.system_one(state=state, questions=again)
            except Exception as failed:  # the first answer stands, the failure noted with its type
                second = failed
        return self._escalation_merged(call, response, verdicts, second)

    def list_models(self) -> list[ModelMetadata]:
        """The models a System One deployment serves (its ``GET /v1/models``, ``{"models": [...]}``); a
        server answering another shape is a ``MalformedAnswerError`` saying so."""
        self._check_open()
        return _native.listed(self._fetch(_native.listing(self._options)))

    @property
    def decisions(self) -> Decisions:
        """OpenAI's Decisions API over this client: ``decisions.create(input=..., questions=[...])``."""
        return Decisions(self)

    def close(self) -> None:
        """Refuse further calls and stop the worker threads once the questions they run are answered;
        questions of a call in flight that have not started are cancelled. The SDK client stays open.
        Calling it again does nothing."""
        with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if self._cache is not None:
            self._cache.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _executor(self) -> ThreadPoolExecutor:
        # One pool for the client's life: starting eight threads on every call made an 8-question
        # call 1.4x slower than eight bare SDK calls against a fast server (scripts/bench client).
        with self._pool_lock:
            self._check_open()  # closed by another thread since this call began
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._options.max_concurrency, thread_name_prefix="jevper")
            return self._pool

    def _natively(self, call: Plan) -> SystemOneResponse | None:
        """The call answered by System One, or None for the prompt surfaces."""
        options, memory = call.options, self._memory
        if _native.discovers(options, memory):
            failures = memory.failed_discoveries(options.model)
            with self._discovery:
                self._drive(_native.discover(options, memory, failures), self._fetch)
        return self._drive(_native.answer(options, call.given, call.questions, memory), self._fetch)

    def _fetch(self, request: _routes.Fetch) -> Mapping[str, Any]:
        return _routes.fetch(self._client, request, self._options.sending)

    def _each(self, call: Plan, work: Callable[[Plan, str, Question], T]) -> list[T]:
        """``work`` for every question of the call, in order: on the caller's thread, and on the client's
        threads once one waits on the server (``jevper._spread``); each worker in a copy of the caller's
        context, so its retries count against this call."""
        workers = min(call.options.max_concurrency, len(call.questions))

        def asked(item: tuple[str, Question]) -> T:
            with self._in_flight:
                self._check_open()  # a question not started when the client closed is not asked
                return work(call, *item)

        return _spread.spread(self._executor, call.questions, asked, workers, self._pace)

    def _in_orders(
        self, call: Plan, work: Callable[[Plan, str, Question], Answered | E]
    ) -> list[Answered | E]:
        """``work`` for every question of the call, a choice once per order of its options (option_orders),
        each choice's orders folded into one answer."""
        return folded(call.questions, self._each(in_orders(call), work), call.options.option_orders)

    def _answer(self, call: Plan, qid: str, question: Question) -> Answered:
        steps = answer(question, call.state, call.options, self._memory, qid)
        return self._drive(steps, lambda request: self._send(request, call.options.sending))

    def _send(self, call: Call, sending: _transport.Sending) -> Any:
        return _transport.send(self._client, call.surface, call.request, self._options.timeout, sending)

    @staticmethod
    def _drive(steps: Generator[R, Any, T], send: Callable[[R], Any]) -> T:
        """Send each request the generator yields and hand it the result (or throw it the error), until it
        returns."""
        try:
            request = next(steps)
            while True:
                try:
                    result = send(request)
                except JevperError as error:
                    request = steps.throw(error)
                else:
                    request = steps.send(result)
        except StopIteration as done:
            returned: T = done.value
            return returned


class Decisions:
    """``SystemOneClient.decisions``: OpenAI's Decisions API answered through the client's surface and method
    (its options, and a call's overrides, apply), or natively by the server with ``api="decisions"``. Under
    ``api="auto"`` (and ``method="auto"``) the server's own POST /v1/decisions is asked first; a server
    without it (or answering it in another shape) is remembered so, once per model, and its questions are
    asked as ``system_one`` would ask them."""

    def __init__(self, client: SystemOneClient) -> None:
        self._client = client

    def create(
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
        """Ask every question about ``input``; the answers come back in question order, a question whose
        answer cannot be read as a refusal among them. ``instructions`` (this client's addition) lead the
        input as a developer message; ``prompt_cache_key`` is sent as the API's and as the client's own.
        An invalid request, or an image where the surface in use reads none, is refused before any request
        there with an ``InvalidDecisionError`` naming the param. A server that fails (also when a question
        is asked again after an answer that could not be read) fails the call with its ``ProviderError``.
        """
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
        return client._drive(steps, self._step)

    def _step(self, step: _decisions.Step) -> Any:
        client = self._client
        if isinstance(step, _decisions.AskEach):
            return client._each(step.plan, self._question)
        if isinstance(step, _decisions.AskSystemOne):
            return client._natively(step.plan)
        if isinstance(step, _decisions.LookUp):
            return client._looked_up(step.plan)
        if isinstance(step, _decisions.Keep):
            return client._stored(step.plan, step.entry)
        if isinstance(step, _decisions.AskAgain):
            return self._asked_again(step)
        return client._fetch(step)

    def _asked_again(
        self, step: _decisions.AskAgain
    ) -> tuple[DecisionResponse | Exception | None, dict[str, Any]]:
        """The unsure questions asked of ``escalate.to``; its failure returned, never raised."""
        to = step.escalation.to
        servers = {"first": self._client._identity(step.model), "second": to._identity()}
        if step.asked is None:
            return None, servers
        try:
            return to.decisions.create(**step.asked), servers
        except Exception as failed:  # the first answers stand, the failure noted with its type
            return failed, servers

    def _question(self, plan: Plan, qid: str, question: Question) -> Answered | _decisions.Refused:
        client = self._client
        steps = _decisions.question(plan, qid, question, client._memory)
        return client._drive(steps, lambda request: client._send(request, plan.options.sending))
