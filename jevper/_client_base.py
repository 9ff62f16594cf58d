"""What the blocking and the async client share: their options, the plan of a call, the answer's assembly.

``SystemOneClient`` and ``AsyncSystemOneClient`` add only their send loops, as httpx's ``Client`` and
``AsyncClient`` do over its ``BaseClient``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Unpack

from jevper import _ask, _cache, _escalate, _json
from jevper._engine import Answered
from jevper._errors import ConfigError, InvalidQuestionError
from jevper._failure import redacted_url
from jevper._json import Json
from jevper._memory import Memory
from jevper._options import ClientOptions, Options, Overrides, checked_examples
from jevper._orders import expanded
from jevper._prompt import StateTurns, state_turns
from jevper._trace import Prefill, QuestionTrace, Route, Trace
from jevper._usage import total
from jevper._wire import decisions
from jevper.calibration import prompt_digest
from jevper.models import Example, State, SystemOneResponse
from jevper.questions import Choice, Noul, Question, as_question


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
        cache, mode = self._options.cache, self._options.cache_mode
        self._cache = None if cache is None or mode == "off" else _cache.AnswerCache(cache, mode)

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

    def _plan(
        self, state: State, questions: Mapping[str, object], overrides: Overrides, model: str | None = None
    ) -> Plan:
        self._check_open()
        if not isinstance(questions, Mapping) or not questions:
            raise InvalidQuestionError(
                f"questions: expected a non-empty mapping of question id to question, got {questions!r:.80}"
            )
        options = self._options.overridden(overrides, model)
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
        if options.noul_requires_question:
            unasked = [qid for qid, q in asked if isinstance(q, Noul) and not q.instructions]
            if unasked:
                raise InvalidQuestionError(
                    f"questions[{unasked[0]!r}]: expected a Noul with instructions (the question to "
                    "answer yes or no), because the client was made with noul_requires_question=True; "
                    "give instructions=, or make the client with noul_requires_question=False",
                    loc=("questions", unasked[0], "instructions"),
                    problem="expected instructions",
                )
        if any(example.answer is not None for example in options.examples):
            options = replace(options, examples=fitted(options.examples, asked))
        if any(question.examples for _, question in asked):
            options = replace(options, examples=with_own_examples(options.examples, asked))
        return Plan(options, state_turns(state), asked, _json.checked("state", state))

    def cached(
        self,
        *,
        state: State,
        questions: Mapping[str, Question | Mapping[str, Any]],
        model: str | None = None,
        **overrides: Unpack[Overrides],
    ) -> SystemOneResponse | None:
        """The answers the client's cache (``cache=``) holds for this call, without asking the server;
        None with no cache, in a mode that does not read it (write, off), or when it holds none."""
        return self._cached(self._plan(state, questions, overrides, model))

    def _cached(self, plan: Plan) -> SystemOneResponse | None:
        """The call answered from the cache (no request), or None: no cache, a mode that does not read it,
        or a miss."""
        if self._cache is None or not self._cache.reads:
            return None
        key = _cache.key(self._cache_parts(plan, None))
        kept = self._cache.get(key)
        if kept is None:
            return None
        return _cache.response(kept, {"hit": True, "file": self._cache.path, "key": key})

    def _kept(self, plan: Plan, response: SystemOneResponse) -> SystemOneResponse:
        """``response`` written to the cache (when its mode writes), under the key of what was asked and of
        the surface and method each answer was read with; its ``debug["cache"]`` says so."""
        if self._cache is None:
            return response
        asked = _cache.key(self._cache_parts(plan, None))
        written = self._cache.writes
        if written:
            answered = _cache.key(self._cache_parts(plan, _cache.used(response)))
            self._cache.put({asked, answered}, _cache.entry(response))
        trace = {"hit": False, "file": self._cache.path, "key": asked, "written": written}
        return replace(response, debug={**response.debug, "cache": trace})

    def _looked_up(self, plan: Plan) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """What the cache holds for a call other than ``system_one``'s (``plan``'s parts say which; a
        Decisions call's), and its trace; None with no cache, a mode that does not read it, or a miss."""
        if self._cache is None or not self._cache.reads:
            return None
        key = _cache.key(self._cache_parts(plan, None))
        kept = self._cache.get(key)
        return None if kept is None else (kept, {"hit": True, "file": self._cache.path, "key": key})

    def _stored(self, plan: Plan, entry: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """``entry`` written under ``plan``'s key when the mode writes (None: nothing worth keeping, a
        refusal's call), and the trace to say with it; None with no cache."""
        if self._cache is None:
            return None
        key = _cache.key(self._cache_parts(plan, None))
        written = self._cache.writes and entry is not None
        if written:
            assert entry is not None
            self._cache.put({key}, entry)
        return {"hit": False, "file": self._cache.path, "key": key, "written": written}

    def _check_escalation(self, kind: type) -> None:
        """``escalate=`` asks a client of this one's kind again (a blocking one cannot be awaited)."""
        escalation = self._options.escalate
        if escalation is None:
            return
        if not isinstance(escalation.to, kind):
            raise ConfigError(
                f"escalate: expected a {kind.__name__} to ask the unsure questions again (the same kind as "
                f"this client), got {type(escalation.to).__name__}; make the stronger model's client a "
                f"{kind.__name__}"
            )
        if escalation.to is self:
            raise ConfigError(
                "escalate: expected another client than this one to ask again, got this client itself; "
                "make a client for the stronger model"
            )

    def _unsure(
        self, plan: Plan, response: SystemOneResponse
    ) -> tuple[dict[str, _escalate.Verdict], dict[str, Question]]:
        """Each question's verdict on the first answers, and the questions to ask the second client."""
        escalation = plan.options.escalate
        assert escalation is not None
        verdicts = _escalate.unsure(escalation.below, plan.options.calibration, response)
        return verdicts, _escalate.asked_again(verdicts, plan.questions)

    def _escalation_merged(
        self,
        plan: Plan,
        response: SystemOneResponse,
        verdicts: Mapping[str, _escalate.Verdict],
        second: SystemOneResponse | Exception | None,
    ) -> SystemOneResponse:
        escalation = plan.options.escalate
        assert escalation is not None
        servers = {"first": self._identity(plan.options.model), "second": escalation.to._identity()}
        return _escalate.merged(response, verdicts, second, servers, escalation.below)

    def _identity(self, model: str | None = None) -> dict[str, str | None]:
        """Which server a client asks: its model and base URL (without credentials)."""
        base_url = getattr(self._client, "base_url", None)
        return {
            "model": model or self._options.model,
            "server": None if base_url is None else redacted_url(str(base_url)),
        }

    def _cache_parts(self, plan: Plan, used: list[list[str]] | None) -> dict[str, object]:
        """Everything that decides a call's answers, as JSON values (``jevper._cache.key`` digests them).
        ``used``: each question's method and surface as read; None for the ones asked for."""
        options = plan.options
        base_url = getattr(self._client, "base_url", None)
        calibration = options.calibration
        return {
            "server": None if base_url is None else redacted_url(str(base_url)),
            "model": options.model,
            "read_with": used or [[options.method, options.api]] * len(plan.questions),
            "instructions": [_ask._LABEL_SYSTEM, _ask._JSON_SYSTEM],
            "questions": prompt_digest(dict(plan.questions)),
            "examples": _cache.canonical([asdict(example) for example in options.examples]),
            "option_orders": options.option_orders,
            "reading": [
                options.top_logprobs,
                options.normalize_probabilities,
                options.temperature,
                None if options.reasoning is None else asdict(options.reasoning),
                options.prefill,
                _cache.canonical(options.extra_body),
                options.n_retry_malformed,
                options.structured_outputs,
            ],
            "state": plan.given,
            "calibration": None if calibration is None else calibration.digest(),
            # Only when given, so the keys of calls without images stay those already written.
            **({"images": list(options.images)} if options.images else {}),
        }

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
            tuple(plan.options.extra_headers),
        )
        usage = total(r for one in answered for r in one.trail.results)
        return SystemOneResponse(
            answers=answers, usage=usage, reasoning=reasoning, debug=trace.to_dict(), model=model
        )


def fitted(examples: Sequence[Example], questions: Sequence[tuple[str, Question]]) -> tuple[Example, ...]:
    """Examples given with one ``answer`` in a plain list, as examples of every question of the call the
    answer fits: an option of a choice, a bool for a noul, a level index of a score."""
    fitting = []
    for example in examples:
        if example.answer is None:
            fitting.append(example)
            continue
        answers = {qid: example.answer for qid, question in questions if fits(question, example.answer)}
        fitting.append(replace(example, answers={**answers, **example.answers}, answer=None))
    return tuple(fitting)


def with_own_examples(
    examples: Sequence[Example], questions: Sequence[tuple[str, Question]]
) -> tuple[Example, ...]:
    """The call's examples with each question's own (``Choice(..., examples=[...])``) in place of theirs
    for it: an example given on a question wins over the call's and the client's, which keep their
    answers to the other questions (one left answering nothing is dropped)."""
    own = {qid: question.examples for qid, question in questions if question.examples}
    kept = []
    for example in examples:
        answers = {qid: answer for qid, answer in example.answers.items() if qid not in own}
        if answers:
            kept.append(replace(example, answers=answers))
    return (*kept, *checked_examples(own))


def fits(question: Question, answer: object) -> bool:
    if isinstance(question, Choice):
        return isinstance(answer, str) and answer in question.options
    if isinstance(question, Noul):
        return isinstance(answer, bool)
    return isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(question.criteria)


def in_orders(plan: Plan) -> Plan:
    """The call with every question as it is asked: a choice once per order of its options
    (``option_orders``), so the clients ask the orders concurrently, as they ask the call's questions."""
    orders = plan.options.option_orders
    return plan if orders == 1 else replace(plan, questions=expanded(plan.questions, orders))


def question_trace(answered: Answered) -> QuestionTrace:
    trail = answered.trail
    prefill = None if trail.prefill is None else Prefill(trail.prefill, tuple(trail.prefill_replies))
    return QuestionTrace(answered.method, answered.surface, trail.requests, tuple(trail.why), prefill)
