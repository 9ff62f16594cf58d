"""What the blocking and the async client share: their options, the plan of a call, the answer's assembly.

``SystemOneClient`` and ``AsyncSystemOneClient`` add only their send loops, as httpx's ``Client`` and
``AsyncClient`` do over its ``BaseClient``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Unpack

from jevper import _json
from jevper._engine import Answered
from jevper._errors import InvalidQuestionError
from jevper._json import Json
from jevper._memory import Memory
from jevper._options import ClientOptions, Options, Overrides
from jevper._orders import expanded
from jevper._prompt import StateTurns, state_turns
from jevper._trace import Prefill, QuestionTrace, Route, Trace
from jevper._usage import total
from jevper._wire import decisions
from jevper.models import State, SystemOneResponse
from jevper.questions import Question, as_question


@dataclass(frozen=True)
class Plan:
    """One call: its options after overrides, the state as turns and as the JSON value it was given, and
    the questions in order."""

    options: Options
    state: StateTurns
    questions: tuple[tuple[str, Question], ...]
    given: Json = None


class BaseClient:
    def __init__(self, client: object, *, model: str, **options: Unpack[ClientOptions]) -> None:
        self._client = client
        self._options = Options.of(model, options)
        self._memory = Memory()
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether ``close()`` (``aclose()``) was called: a closed client takes no more calls."""
        return self._closed

    @property
    def options(self) -> Options:
        """The options every call starts from (a frozen value; a call's overrides replace fields)."""
        return self._options

    def _check_open(self) -> None:
        if self._closed:
            name = type(self).__name__
            raise RuntimeError(
                f"{name}: expected an open client, got one that was closed; make a new {name} (the SDK "
                "client it was given is not closed by it and can be handed to the new one)"
            )

    def _plan(self, state: State, questions: Mapping[str, object], overrides: Overrides) -> Plan:
        self._check_open()
        if not isinstance(questions, Mapping) or not questions:
            raise InvalidQuestionError(
                f"questions: expected a non-empty mapping of question id to question, got {questions!r:.80}"
            )
        options = self._options.overridden(overrides)
        if options.api == decisions.SURFACE:
            raise InvalidQuestionError(
                f"api={options.api!r}: expected decisions.create(), because POST /v1/decisions takes "
                "OpenAI's questions, not System One's; call client.decisions.create(...), or ask "
                "system_one() with api='auto'"
            )
        asked = tuple(
            (_json.text(f"questions[{qid!r}]", str(qid)), as_question(str(qid), q))
            for qid, q in questions.items()
        )
        return Plan(options, state_turns(state), asked, _json.checked("state", state))

    def _assemble(self, plan: Plan, answered: Sequence[Answered]) -> SystemOneResponse:
        memory, model = self._memory, plan.options.model
        answers = {qid: one.answer for (qid, _), one in zip(plan.questions, answered, strict=True)}
        reasoning = {qid: a.reasoning for qid, a in answers.items() if a.reasoning is not None}
        limits: dict[str, str] = {}
        for one in answered:
            limits.update(memory.server_limits(model, one.surface))
        route = None
        if plan.options.api == "auto":
            chosen = memory.routes.get(model)
            native = memory.discovery(model)
            route = Route(
                memory.route(model),
                chosen.why if chosen else "preferred surface",
                None if native is None else native.why,
            )
        trace = Trace(
            {qid: question_trace(one) for (qid, _), one in zip(plan.questions, answered, strict=True)},
            limits,
            route,
        )
        usage = total(r for one in answered for r in one.trail.results)
        return SystemOneResponse(
            answers=answers, usage=usage, reasoning=reasoning, debug=trace.to_dict(), model=model
        )


def in_orders(plan: Plan) -> Plan:
    """The call with every question as it is asked: a choice once per order of its options
    (``option_orders``), so the clients ask the orders concurrently, as they ask the call's questions."""
    orders = plan.options.option_orders
    return plan if orders == 1 else replace(plan, questions=expanded(plan.questions, orders))


def question_trace(answered: Answered) -> QuestionTrace:
    trail = answered.trail
    prefill = None if trail.prefill is None else Prefill(trail.prefill, tuple(trail.prefill_replies))
    return QuestionTrace(answered.method, answered.surface, trail.requests, tuple(trail.why), prefill)
