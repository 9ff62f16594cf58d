"""A Decisions call (``client.decisions.create``) on the client's own machinery: its plan, its native
request (api="decisions", and first under api="auto"), and its answers assembled from System One's or
the engine's.

Like the engine, this never performs I/O: ``create`` is the one body of ``decisions.create``, which the
blocking and the async client drive, each answering its steps. A question whose answer cannot be read
(``READ_FAILURES``) is a refusal among the other answers; a refused request, a server that fails (on a
corrective retry too) or cannot be reached, or an invalid question still fails the call, as it would
every question of it.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from jevper import _escalate, _json, _native
from jevper._calibrated import calibrate
from jevper._client_base import Plan, in_orders, question_trace
from jevper._engine import Answered, Call, answer
from jevper._errors import (
    ClientCapabilityError,
    IncompleteAnswerError,
    InvalidQuestionError,
    JevperError,
    LabelReadoutError,
    MalformedAnswerError,
    ModelRefusalError,
    ProviderError,
)
from jevper._escalate import Escalation
from jevper._failure import server_failure
from jevper._memory import PROMPT, Memory
from jevper._options import DECISIONS_IMAGES, Options, Overrides, no_images
from jevper._orders import folded
from jevper._prompt import StateTurns, state_turns
from jevper._routes import Fetch
from jevper._trace import QuestionTrace, Route, Trace, each
from jevper._usage import total
from jevper._wire import WireResult, dialects
from jevper._wire import decisions as wire
from jevper.calibration import Calibration
from jevper.decisions.answers import (
    DecisionAnswer,
    DecisionChoice,
    DecisionPredicate,
    DecisionRefusal,
    DecisionResponse,
    DecisionUsage,
    answered,
    from_api,
)
from jevper.decisions.rules import DecisionQuestion, DecisionRequest, decision_request
from jevper.models import SystemOneResponse
from jevper.questions import Question

#: What a question's answer may fail by without costing the others: the model answered prose, or
#: something that does not fit, or was cut off, or declined to answer.
READ_FAILURES = (LabelReadoutError, MalformedAnswerError, IncompleteAnswerError, ModelRefusalError)


@dataclass(frozen=True)
class DecisionCall:
    """One Decisions call: the request as validated, and its options."""

    request: DecisionRequest
    options: Options

    def prompt_plan(self) -> Plan:
        """The plan its questions are asked by on jevper's own surfaces (System One, the prompt surfaces),
        refused before any request there when they cannot carry the input (an image)."""
        state = self.request.state(f"api={self.options.api!r}")
        questions = tuple((qid(i), q.question) for i, q in enumerate(self.request.questions))
        return Plan(self.options, state_turns(state), questions, _json.checked("state", state))


def qid(index: int) -> str:
    """The id a question is asked under: its place in the request, as a param names it."""
    return f"questions[{index}]"


def body(
    options: Options,
    input: object,
    questions: object,
    model: str | None,
    prompt_cache_key: str | None,
    prompt_cache_options: object,
    safety_identifier: str | None,
) -> dict[str, Any]:
    """The keywords of ``decisions.create`` as the request body; the model is the client's unless given."""
    body: dict[str, Any] = {
        "input": input,
        "model": options.model if model is None else model,
        "questions": questions,
    }
    optional = {
        "prompt_cache_key": prompt_cache_key,
        "prompt_cache_options": prompt_cache_options,
        "safety_identifier": safety_identifier,
    }
    body.update((name, value) for name, value in optional.items() if value is not None)
    return body


def plan(
    options: Options, body: Mapping[str, Any], instructions: object, overrides: Overrides
) -> DecisionCall:
    """The call, its request checked by the schema before any request."""
    request = decision_request(body, instructions=instructions)
    options = options.overridden(overrides)
    if request.model != options.model:
        options = replace(options, model=request.model)
    return DecisionCall(request, options)


def asks_natively(options: Options, memory: Memory) -> bool:
    """Whether the call goes to the server's POST /v1/decisions first: api="decisions"; or api="auto"
    with nothing the route cannot carry (a method, several orders of a choice's options, examples, a
    thinking budget, a calibration, which is fit on a prompt surface's answers), for a model not known
    to lack the route."""
    if options.api == wire.SURFACE:
        return True
    if not _native.auto_native(options) or options.examples or options.reasoning:
        return False
    if options.calibration is not None:
        return False
    note = memory.decisions_route(options.model)
    return note is None or note.value in dialects.DECISIONS_DIALECTS


def native(
    call: DecisionCall, memory: Memory
) -> Generator[Fetch, Mapping[str, Any], DecisionResponse | None]:
    """The whole call in one POST /v1/decisions, in the dialect the server speaks there: OpenAI's shape
    first, then, where that is refused as a body the server does not take (a 400, a 422) or answered in
    no shape of OpenAI's, SGLang's body and System One's shape, each once; the first answered in its own
    shape is the server's dialect, remembered once per model and spoken from then on. What the dialect
    cannot carry is a ClientCapabilityError naming it under api="decisions". Under api="auto" a server
    without the route (404, 405, 501) or that speaks none of them is remembered as such, and None sends
    this call (and, then, the model's later ones) to jevper's own surfaces; so does any other refusal,
    for this call alone."""
    options = call.options
    auto = options.api == "auto"
    known = memory.decisions_route(options.model)
    spoken = (known.value,) if known is not None and known.value in dialects.DECISIONS_DIALECTS else None
    first: JevperError | None = None
    for dialect in spoken or dialects.DECISIONS_DIALECTS:
        try:
            response = yield from _in_dialect(dialect, call)
        except InvalidQuestionError:
            # The request cannot be put in this dialect (ClientCapabilityError; an image on System One's
            # shape): while the dialect is unknown, the next one is tried.
            if spoken is None:
                continue
            if auto:
                return None
            raise
        except (ProviderError, MalformedAnswerError) as error:
            first = first or error
            if spoken is None and _another_shape(error):
                continue
            break
        if spoken is None:
            memory.settle_decisions(options.model, dialect, f"POST /v1/decisions answered in {dialect} shape")
        return response
    assert first is not None
    if not auto:
        raise first
    if _not_served(first):
        memory.settle_decisions(
            options.model, PROMPT, f"POST /v1/decisions did not answer in any dialect jevper speaks: {first}"
        )
    return None


def _in_dialect(dialect: str, call: DecisionCall) -> Generator[Fetch, Mapping[str, Any], DecisionResponse]:
    """The call in one POST /v1/decisions in ``dialect``'s body, its answer read into OpenAI's shape."""
    options = call.options
    count = len(call.request.questions)
    why = f"one POST /v1/decisions request in {dialect} body carried all {count} question(s) of the call"
    route = (
        None
        if options.api != "auto"
        else Route(wire.SURFACE, f"the server answers POST /v1/decisions itself, in {dialect} shape")
    )
    if dialect == dialects.SYSTEM_ONE:
        prompt = call.prompt_plan()
        if not _native.within_levels(prompt.questions, dialects.SYSTEM_ONE):
            raise ClientCapabilityError(
                f"the server speaks {dialects.SYSTEM_ONE} shape on POST /v1/decisions, which takes scores of "
                f"at most {dialects.MAX_LEVELS[dialects.SYSTEM_ONE]} levels; merge levels, or ask with "
                "api='auto'"
            )
        native_asked, body = _native.request(options, prompt.given, prompt.questions)
        raw = yield Fetch("POST", wire.ROUTE, body, options.model, options.timeout)
        one = _native.response(options, prompt.questions, native_asked, raw, why, route)
        return from_system_one(call, one)
    asked = call.request.body()
    if dialect == dialects.SGLANG:
        body = dialects.sglang_body(asked, options.extra_body)
        raw = yield Fetch("POST", wire.ROUTE, body, options.model, options.timeout)
        if not dialects.answered_as(dialects.SGLANG, raw):
            raise MalformedAnswerError(
                f"POST /v1/decisions: expected {dialects.SGLANG} answer (object 'decisions', a list of "
                f"answers) to {dialects.SGLANG} body, got keys {sorted(raw)[:6]!r}"
            )
        raw = dialects.sglang_answers(raw, asked)
    else:
        raw = yield Fetch(
            "POST", wire.ROUTE, wire.build(asked, options.extra_body), options.model, options.timeout
        )
    result = wire.read(raw, asked["questions"], model=options.model)
    trace = Trace(
        each([qid(i) for i in range(count)], QuestionTrace("native", wire.SURFACE, 1, (why,))), {}, route
    )
    return replace(from_api(result.raw), debug=trace.to_dict())


def _another_shape(error: JevperError) -> bool:
    """A refusal that may say "not this body" rather than "not this request" or "not now": a 400 or a
    422, or a 200 in no shape of the dialect's."""
    if isinstance(error, MalformedAnswerError):
        return True
    return isinstance(error, ProviderError) and error.status in (400, 422)


def _not_served(error: JevperError) -> bool:
    """A refusal that says the server has no Decisions route in a dialect jevper speaks, rather than "not
    now"."""
    if isinstance(error, MalformedAnswerError):
        return True
    assert isinstance(error, ProviderError)
    return error.kind in ("missing_route", "not_supported") or error.status in (404, 405, 501)


def from_system_one(call: DecisionCall, response: SystemOneResponse) -> DecisionResponse:
    """System One's answers (api="systemone", or a decision model under api="auto") in the API's terms,
    calibrated as ``assembled``'s are."""
    asked = [
        (_calibration_id(i, q), q.question, response.answers[qid(i)])
        for i, q in enumerate(call.request.questions)
    ]
    mapped, calibration = calibrate(call.options, asked)
    debug = dict(response.debug)
    if calibration is not None:
        debug["calibration"] = calibration.to_dict()
    answers = tuple(
        answered(question, answer) for question, answer in zip(call.request.questions, mapped, strict=True)
    )
    return DecisionResponse(
        answers, response.model or call.options.model, DecisionUsage.of(response.usage), debug
    )


def _calibration_id(index: int, question: DecisionQuestion) -> str:
    """The id a client's calibration knows a question by: its name (what a System One question's id is
    when the same questions are asked both ways), else its place."""
    return question.name if question.name is not None else qid(index)


@dataclass(frozen=True)
class Refused:
    """A question whose answer could not be read: why, and the responses it cost (``usage`` counts them)."""

    failure: JevperError
    results: tuple[WireResult, ...]

    def __str__(self) -> str:
        return str(self.failure)


def question(
    plan: Plan, qid: str, asked: Question, memory: Memory
) -> Generator[Call, WireResult, Answered | Refused]:
    """One question of the call, as the engine answers it, or a refusal when its answer cannot be read
    (``READ_FAILURES``), with every response it was sent. A server that failed meanwhile (the corrective
    retry's 503) fails the call instead, as ``_failure.server_failure`` finds it: only an unreadable
    answer is a refusal."""
    results: list[WireResult] = []
    steps = answer(asked, plan.state, plan.options, memory, qid)
    try:
        request = next(steps)
        while True:
            try:
                result = yield request
            except JevperError as error:
                request = steps.throw(error)
            else:
                results.append(result)
                request = steps.send(result)
    except StopIteration as done:
        answered: Answered = done.value
        return answered
    except READ_FAILURES as failure:
        cause = server_failure(failure)
        if cause is not None:
            # The server's error, as it came (caused by what its client raised), not the readout's.
            raise cause from cause.__cause__
        return Refused(failure, tuple(results))
    finally:
        steps.close()


@dataclass(frozen=True)
class AskSystemOne:
    """A step of ``create``: the questions asked as ``system_one`` asks them first (System One, for a
    decision model); the client sends back its ``_natively`` answer, or None."""

    plan: Plan


@dataclass(frozen=True)
class AskEach:
    """A step of ``create``: every question of ``plan`` (a choice once per order of its options) asked
    by ``question``; the client sends back their outcomes, in order."""

    plan: Plan


@dataclass(frozen=True)
class LookUp:
    """A step of ``create``: the client's answer cache read for ``plan`` (``cache_plan``); the client
    sends back the entry and its trace, or None (no cache, a mode that does not read it, a miss)."""

    plan: Plan


@dataclass(frozen=True)
class Keep:
    """A step of ``create``: ``entry`` written to the client's answer cache under ``plan`` (None: a call
    with a refusal, which is not kept); the client sends back the trace, or None with no cache."""

    plan: Plan
    entry: dict[str, Any] | None


@dataclass(frozen=True)
class AskAgain:
    """A step of ``create``: the unsure questions asked again of ``escalation.to`` by its own
    ``decisions.create(**asked)`` (None: none were unsure, nothing is asked); the client sends back its
    response or its failure (None when nothing was asked), and which servers the two clients ask, the
    first as ``model``."""

    escalation: Escalation
    model: str
    asked: dict[str, Any] | None


#: What ``create`` asks its client for: a request to the server's own routes, or one of the above.
Step = Fetch | AskSystemOne | AskEach | LookUp | Keep | AskAgain


def cache_plan(call: DecisionCall) -> Plan:
    """The call as the answer cache keys it, by the rules of ``system_one``'s calls (the server, the
    model, the surface and method asked for, the prompt, the settings, the calibration): its questions,
    and as its state the request's input and questions as sent (their names and values, images
    included), under a route of their own, so a Decisions call never answers a System One call."""
    body = call.request.body()
    questions = tuple((qid(i), q.question) for i, q in enumerate(call.request.questions))
    given = {"route": wire.SURFACE, "input": body["input"], "questions": body["questions"]}
    return Plan(call.options, StateTurns((), ()), questions, given)


def kept_entry(response: DecisionResponse) -> dict[str, Any] | None:
    """What the cache keeps of a call: its answers, model and trace; None when a question was refused
    (a failure, asked again next time, as ``system_one``'s errors are)."""
    if any(isinstance(answer, DecisionRefusal) for answer in response.answers):
        return None
    return {"decision": response.to_api(), "debug": response.debug}


def from_kept(kept: Mapping[str, Any], trace: Mapping[str, Any]) -> DecisionResponse:
    """A kept call's response, at no cost (no request, no tokens), ``trace`` said in ``debug["cache"]``."""
    response = from_api(kept["decision"])
    debug = {**kept.get("debug", {}), "cache": dict(trace)}
    return replace(response, usage=DecisionUsage(), debug=debug)


def create(
    options: Options,
    memory: Memory,
    *,
    input: object,
    questions: object,
    model: str | None,
    instructions: object,
    prompt_cache_options: object,
    safety_identifier: str | None,
    overrides: Overrides,
) -> Generator[Step, Any, DecisionResponse]:
    """``decisions.create``, for both clients: each drives it, sending each step's answer back."""
    given = body(
        options,
        input,
        questions,
        model,
        overrides.get("prompt_cache_key"),
        prompt_cache_options,
        safety_identifier,
    )
    call = plan(options, given, instructions, overrides)
    if call.options.images:
        raise no_images("decisions.create", "OpenAI's Decisions request", DECISIONS_IMAGES)
    escalation = call.options.escalate
    if escalation is not None:  # refused before any request
        ids = [_calibration_id(i, q) for i, q in enumerate(call.request.questions)]
        _escalate.check_thresholds(escalation.below, call.options.calibration, ids)
    keyed = cache_plan(call)
    hit: tuple[dict[str, Any], dict[str, Any]] | None = yield LookUp(keyed)
    if hit is not None:
        answered = from_kept(*hit)
    else:
        answered = yield from _answered(call, memory)
        trace: dict[str, Any] | None = yield Keep(keyed, kept_entry(answered))
        if trace is not None:
            answered = replace(answered, debug={**answered.debug, "cache": trace})
    if escalation is None:
        return answered
    return (yield from escalated(call, escalation, answered))


def escalated(
    call: DecisionCall, escalation: Escalation, response: DecisionResponse
) -> Generator[Step, Any, DecisionResponse]:
    """The questions ``response`` is unsure of (by ``system_one``'s one rule, ``jevper._escalate``; a
    refusal is unsure of everything) asked again of ``escalation.to``, only those, in one call; each
    question's route in ``debug["escalation"]`` as ``system_one`` keeps it, both calls' usage summed. A
    second call that fails, or refuses a question the first answered, leaves the first answer with the
    failure noted."""
    verdicts = [
        _verdict(_calibration_id(i, q), q, answer, escalation.below, call.options.calibration)
        for i, (q, answer) in enumerate(zip(call.request.questions, response.answers, strict=True))
    ]
    again = [i for i, found in enumerate(verdicts) if found.escalated]
    body = call.request.body()
    asked = {"input": body["input"], "questions": [body["questions"][i] for i in again]}
    if call.request.safety_identifier is not None:
        asked["safety_identifier"] = call.request.safety_identifier
    second, servers = yield AskAgain(escalation, call.options.model, asked if again else None)
    seconds = dict(zip(again, second.answers, strict=True)) if isinstance(second, DecisionResponse) else {}
    answers = list(response.answers)
    routes: dict[str, Any] = {}
    for i, (first, found) in enumerate(zip(response.answers, verdicts, strict=True)):
        route = _escalate.Routed("first", found, first)
        other = seconds.get(i)
        if found.escalated and isinstance(second, Exception):
            route = route.failed(second)
        elif isinstance(other, DecisionRefusal) and not isinstance(first, DecisionRefusal):
            route = replace(route, second=other, failure=("DecisionRefusal", other.reason or "refused"))
        elif other is not None:
            answers[i] = other
            route = replace(route, answered_by="second", second=other)
        routes[qid(i)] = route.to_dict()
    trace: dict[str, Any] = {"below": escalation.below, "servers": dict(servers), "questions": routes}
    usage = response.usage
    if isinstance(second, DecisionResponse):
        usage = _summed(usage, second.usage)
        trace["second_debug"] = second.debug
    debug = {**response.debug, "escalation": trace}
    return replace(response, answers=tuple(answers), usage=usage, debug=debug)


def _verdict(
    calibration_id: str,
    question: DecisionQuestion,
    answer: DecisionAnswer,
    below: _escalate.Below,
    calibration: Calibration | None,
) -> _escalate.Verdict:
    """An answer held to the threshold as ``system_one``'s is: its top option named as the calibration
    names it (a predicate's "true" or "false", a choice's option, a score's level index as text)."""
    if isinstance(answer, DecisionRefusal):
        return _escalate.held(calibration_id, None, 0.0, below, calibration)
    if isinstance(answer, DecisionPredicate):
        top = _escalate.top_of(["true", "false"], [answer.probability, 1.0 - answer.probability])
    elif isinstance(answer, DecisionChoice):
        options = question.question.options
        top = _escalate.top_of(options, [p.probability for p in answer.probabilities])
    else:
        top = _escalate.top_of(
            [str(p.value) for p in answer.probabilities], [p.probability for p in answer.probabilities]
        )
    return _escalate.held(calibration_id, *top, below, calibration)


def _summed(a: DecisionUsage, b: DecisionUsage) -> DecisionUsage:
    """Two calls' usage summed."""
    return DecisionUsage(
        a.input_tokens + b.input_tokens,
        a.output_tokens + b.output_tokens,
        a.cached_tokens + b.cached_tokens,
        a.cache_write_tokens + b.cache_write_tokens,
        a.reasoning_tokens + b.reasoning_tokens,
        a.requests + b.requests,
    )


def _answered(call: DecisionCall, memory: Memory) -> Generator[Step, Any, DecisionResponse]:
    """The call asked: the server's own route, System One or the prompt surfaces."""
    if asks_natively(call.options, memory):
        answered = yield from native(call, memory)
        if answered is not None:
            return answered
    prompt = call.prompt_plan()
    system_one: SystemOneResponse | None = yield AskSystemOne(prompt)
    if system_one is not None:
        return from_system_one(call, system_one)
    outcomes: list[Answered | Refused] = yield AskEach(in_orders(prompt))
    return assembled(call, prompt, outcomes, memory)


def assembled(
    call: DecisionCall, prompt: Plan, outcomes: Sequence[Answered | Refused], memory: Memory
) -> DecisionResponse:
    """The prompt surfaces' answers (``outcomes``: each question of ``prompt`` in each of its orders),
    each choice's orders folded, each refusal in its question's place; the usage of every response, a
    refused question's too; the debug as ``system_one``'s (each question's trace, the server limits met,
    the route under api="auto")."""
    model = call.options.model
    questions = call.request.questions
    folded_outcomes = folded(prompt.questions, outcomes, call.options.option_orders)
    read = [
        (_calibration_id(i, q), q.question, got.answer)
        for i, (q, got) in enumerate(zip(questions, folded_outcomes, strict=True))
        if isinstance(got, Answered)
    ]
    mapped, calibration = calibrate(call.options, read)
    calibrated_answers = iter(mapped)
    answers: list[DecisionAnswer] = []
    trace: dict[str, Any] = {}
    limits: dict[str, str] = {}
    for i, (asked, got) in enumerate(zip(questions, folded_outcomes, strict=True)):
        if isinstance(got, Answered):
            answers.append(answered(asked, next(calibrated_answers)))
            trace[qid(i)] = question_trace(got).to_dict()
            limits.update(memory.server_limits(model, got.surface))
        else:
            answers.append(DecisionRefusal(asked.name, str(got)))
            trace[qid(i)] = {"refused": f"{type(got.failure).__name__}: {got}"}
    debug: dict[str, Any] = {"questions": trace, "server_limits": limits}
    if calibration is not None:
        debug["calibration"] = calibration.to_dict()
    if call.options.api == "auto":
        chosen, declined = memory.routes.get(model), memory.decisions_route(model)
        debug["route"] = {
            "surface": memory.route(model),
            "why": chosen.why if chosen else "preferred surface",
            "decisions": declined.why if declined else "POST /v1/decisions not asked",
        }
    sent = (
        result
        for got in outcomes
        for result in (got.trail.results if isinstance(got, Answered) else got.results)
    )
    return DecisionResponse(tuple(answers), model, DecisionUsage.of(total(sent)), debug)
