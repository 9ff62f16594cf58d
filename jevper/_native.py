"""System One: every question of a call in one request, answered by the server natively; and how
api="auto" decides, once per model, whether a model is a decision model that System One serves.

Like the engine, this never performs I/O: it yields a ``Fetch`` and is sent the parsed JSON body (or
thrown the JevperError); the blocking and the async client drive the same generators.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from typing import Any

from jevper._ask import instructions
from jevper._distribution import choice_confidence, clamped
from jevper._errors import ClientCapabilityError, JevperError, MalformedAnswerError, ProviderError
from jevper._failure import judge
from jevper._json import Json
from jevper._memory import NATIVE, PROMPT, Memory, Note
from jevper._options import Options, native_only, no_images
from jevper._routes import Fetch
from jevper._trace import QuestionTrace, Route, Trace, each
from jevper._wire import dialects, model_list, systemone
from jevper.models import (
    Answer,
    ChoiceAnswer,
    ModelMetadata,
    NoulAnswer,
    ScoreAnswer,
    SystemOneResponse,
    Usage,
)
from jevper.questions import Choice, Noul, Question, Score, system_one_limits

#: The longest the model list may take: a cheap listing, asked once per model before its first call.
DISCOVERY_TIMEOUT = 10.0
METHOD = "native"
#: api="auto", per model: System One answers it in Ollama's dialect (found through POST /api/show).
OLLAMA = f"{NATIVE} ({dialects.OLLAMA})"


def discovers(options: Options, memory: Memory) -> bool:
    """Whether this call asks GET /models first: api="auto", method="auto" and one order of a choice's
    options, the model not yet settled (never answered, or only failed to answer)."""
    return auto_native(options) and memory.native_route(options.model) is None


def auto_native(options: Options) -> bool:
    """Whether api="auto" may answer through a server's own route: nothing asked that it cannot carry (a
    method; several orders of a choice's options, ``option_orders``)."""
    return options.api == "auto" and options.method == "auto" and options.option_orders == 1


def discover(
    options: Options, memory: Memory, failures: int = 0
) -> Generator[Fetch, Mapping[str, Any], Note]:
    """Ask GET /models for this model and remember what it answers; an answer that is not a listing (a
    404, a body that is not one) means "not a decision model", remembered with why, and the call goes on
    as before System One existed. A failure to answer at all (a timeout, an unreachable server, a 503) is
    not remembered as an answer: this call goes to the prompt surfaces, and a later one asks again.

    ``failures``: how many failures the caller had seen before it waited its turn; a failure since then
    (another call's, while this one waited) is shared rather than asked again."""
    settled = memory.native_route(options.model)
    if settled is not None:
        return settled
    if memory.failed_discoveries(options.model) > failures:
        failed = memory.discovery(options.model)
        assert failed is not None
        return failed
    timeout = min(options.timeout, DISCOVERY_TIMEOUT)
    body: Mapping[str, Any] = {}
    try:
        body = yield Fetch("GET", model_list.ROUTE, None, options.model, timeout)
        listing = model_list.decision_model(body, options.model)
    except JevperError as error:
        if _unanswered(error):
            return memory.discovery_failed(
                options.model, f"GET /models failed, so not asked through System One this time: {error}"
            )
        listing = model_list.Listing(False, f"GET /models failed, so not a decision model: {error}")
    if listing.listed and not listing.says_outputs and memory.no_show_route is None:
        # The list names the model without saying what it outputs: Ollama documents a decision model in
        # POST /api/show's capabilities (and nothing in its model list), so that route is asked; a
        # server without it says so once.
        shown = yield from _ollama_show(options, timeout, memory)
        if shown is not None:
            memory.settle(options.model, OLLAMA, f"{listing.why}; {shown}")
            note = memory.native_route(options.model)
            assert note is not None
            return note
    memory.settle(options.model, NATIVE if listing.decisions else PROMPT, listing.why)
    note = memory.native_route(options.model)
    assert note is not None
    return note


def _ollama_show(
    options: Options, timeout: float, memory: Memory
) -> Generator[Fetch, Mapping[str, Any], str | None]:
    """Ollama marks a decision model in POST /api/show's ``capabilities``, not in its model list: why the
    model is one there, or None (any failure, or no such capability, leaves the model where the list put
    it). A server that answers the route is missing (404 not naming the model, 405, 501) is remembered,
    so it is asked once, not once per model."""
    try:
        body = yield Fetch("POST", dialects.OLLAMA_SHOW, {"model": options.model}, options.model, timeout)
    except JevperError as error:
        if isinstance(error, ProviderError) and error.kind in ("not_supported", "missing_route"):
            memory.no_show_route = f"POST {dialects.OLLAMA_SHOW} answered {error.status}: no such route"
        return None
    if not dialects.ollama_decision_model(body):
        return None
    return (
        f"POST {dialects.OLLAMA_SHOW} lists {dialects.OLLAMA_CAPABILITY!r} among its capabilities: "
        f"a decision model of {dialects.OLLAMA} System One"
    )


def _unanswered(error: JevperError) -> bool:
    """A failure that says nothing about the model: the server was not reached in time, or was down or
    busy (jevper._failure); a 501 answers that the request is not supported."""
    return isinstance(error, ProviderError) and judge(error).server is not None


def answer(
    options: Options, state: Json, questions: tuple[tuple[str, Question], ...], memory: Memory
) -> Generator[Fetch, Mapping[str, Any], SystemOneResponse | None]:
    """The call's response from System One, or None when its questions go to the prompt surfaces; a call
    with ``images`` that would go there is refused instead (no prompt surface carries them)."""
    answered = yield from _asked(options, state, questions, memory)
    if answered is None and options.images:
        note = memory.native_route(options.model)
        chosen = "the prompt surfaces" if note is None else f"the prompt surfaces ({note.why})"
        raise no_images(f"api={options.api!r} for {options.model!r}", chosen)
    return answered


def ollama_dialect(options: Options) -> bool:
    """Whether a call on api="systemone" carries what only Ollama's dialect takes (keep_alive, images),
    so that dialect's limits are the route's."""
    return options.keep_alive is not None or bool(options.images)


def _asked(
    options: Options, state: Json, questions: tuple[tuple[str, Question], ...], memory: Memory
) -> Generator[Fetch, Mapping[str, Any], SystemOneResponse | None]:
    note = memory.native_route(options.model) if options.api == "auto" else None
    if options.api == "auto":
        if not auto_native(options) or note is None or note.value not in (NATIVE, OLLAMA):
            return None
        if not within_levels(questions, dialects.OLLAMA if note.value == OLLAMA else dialects.TYPESAFE):
            # A score wider than the server's System One takes: read on the prompt surfaces, which take 26.
            return None
        asked_as = f"api='auto' answers {options.model!r} through System One ({note.why})"
        native_only(options, asked_as)
        if options.images and note.value != OLLAMA:
            raise no_images(asked_as, f"{dialects.TYPESAFE} System One")
        ollama = note.value == OLLAMA
    elif options.api != systemone.SURFACE:
        return None
    else:
        ollama = ollama_dialect(options)
        if not within_levels(questions, dialects.OLLAMA if ollama else dialects.TYPESAFE):
            # api="systemone": TypeSafe's limits, refused before sending, unless the call carries what
            # only Ollama's dialect (26 levels) takes: keep_alive, images.
            for qid, question in questions:
                system_one_limits(qid, question)
    asked, body = request(options, state, questions)
    if ollama:
        within_body(body)
    try:
        raw = yield Fetch("POST", systemone.ROUTE, body, options.model, options.timeout)
    except ProviderError as error:
        if note is None or error.kind not in ("not_supported", "missing_route"):
            raise
        # A model listed as a decision model that System One will not answer after all: asked on the
        # prompt surfaces from now on.
        said = f"{error.status} {error.server_message!r}" if error.status else error.server_message
        memory.settle(
            options.model,
            PROMPT,
            f"{note.why}, but POST /systemone answered {said}: asked on the prompt surfaces",
        )
        return None
    why = f"one System One request carried all {len(questions)} question(s) of the call"
    route = None if note is None else Route(systemone.SURFACE, note.why)
    return response(options, questions, asked, raw, why, route)


def within_body(body: Mapping[str, Any]) -> None:
    """A body for Ollama's dialect within the route's cap (64 KiB), refused before sending; measured
    without spaces, the smallest the body can travel."""
    size = len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())
    if size > dialects.OLLAMA_MAX_BODY:
        raise ClientCapabilityError(
            f"{dialects.OLLAMA} System One with a body of {size} bytes: expected at most "
            f"{dialects.OLLAMA_MAX_BODY} (its documented cap), because the route refuses a larger one; send "
            "smaller images (fewer, or scaled down) or a shorter state, or split the questions",
            loc=("images",) if "images" in body else (),
        )


def within_levels(questions: tuple[tuple[str, Question], ...], dialect: str) -> bool:
    """Whether every score fits the System One dialect's levels."""
    most = dialects.MAX_LEVELS[dialect]
    return all(len(q.criteria) <= most for _, q in questions if isinstance(q, Score))


def request(
    options: Options, state: Json, questions: tuple[tuple[str, Question], ...]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The questions in System One's shape, and the body that carries them."""
    asked = {qid: question_body(question) for qid, question in questions}
    body = systemone.build(options.model, state, asked, {**carried(options), **options.extra_body})
    return asked, body


def response(
    options: Options,
    questions: tuple[tuple[str, Question], ...],
    asked: Mapping[str, Mapping[str, Any]],
    raw: Mapping[str, Any],
    why: str,
    route: Route | None,
) -> SystemOneResponse:
    """A System One body, read against the questions asked, as the call's response."""
    result = systemone.read(raw, asked, model=options.model)
    answers = {qid: _answer(question, result.answers[qid]) for qid, question in questions}
    trace = Trace(
        each(list(answers), QuestionTrace(METHOD, systemone.SURFACE, 1, (why,))),
        {},
        route,
        tuple(options.extra_headers),
    )
    usage = Usage(result.usage.prompt_tokens, result.usage.completion_tokens, n_calls=1)
    return SystemOneResponse(answers, usage, {}, trace.to_dict(), model=result.model or options.model)


def carried(options: Options) -> dict[str, Any]:
    """The options System One's body carries when set: the temperature, and Ollama's keep_alive and
    images."""
    fields: dict[str, Any] = {}
    if options.temperature is not None:
        fields["temperature"] = options.temperature
    if options.keep_alive is not None:
        fields["keep_alive"] = options.keep_alive
    if options.images:
        fields["images"] = list(options.images)
    return fields


def listing(options: Options) -> Fetch:
    """The request of ``list_models()``: GET /models, within the discovery's bound."""
    return Fetch("GET", model_list.ROUTE, None, options.model, min(options.timeout, DISCOVERY_TIMEOUT))


def listed(body: Mapping[str, Any]) -> list[ModelMetadata]:
    """The models of a System One deployment's ``GET /v1/models`` body, ``{"models": [{"name", "description",
    "release_date"}, ...]}``; any other shape is a MalformedAnswerError naming what arrived."""
    models = body.get("models")
    if not isinstance(models, list):
        shape = "an OpenAI-style list ('data')" if isinstance(body.get("data"), list) else "no 'models' list"
        raise MalformedAnswerError(
            f"GET /models: expected a System One deployment's {{'models': [...]}}, got {shape} (keys "
            f"{sorted(body)[:6]!r}); list_models() reads System One's model list — for an OpenAI-style "
            "server's, ask its SDK (client.models.list())"
        )
    found = []
    for i, entry in enumerate(models):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if not isinstance(name, str) or not name:
            raise MalformedAnswerError(
                f"GET /models: expected models[{i}] to be an object with a 'name', got {entry!r:.80}"
            )
        description = entry.get("description")
        released = entry.get("release_date")
        found.append(
            ModelMetadata(
                name,
                description if isinstance(description, str) else "",
                released if isinstance(released, str) else None,
            )
        )
    return found


def question_body(question: Question) -> dict[str, Any]:
    """A question in the API's request shape. Instructions left out are sent as the prompt surfaces ask
    them (laya-serve 0.2.1 refuses a question without instructions); noul criteria given as one text are
    shown after the instructions, as the prompt surfaces show them."""
    body: dict[str, Any] = {
        "type": question.type,
        "instructions": question.instructions or instructions(question),
    }
    if isinstance(question, Noul):
        if isinstance(question.criteria, str):
            body["instructions"] = f"{instructions(question)}\nCriteria: {question.criteria}"
        elif question.criteria is not None:
            body["criteria"] = dict(question.criteria)
    elif isinstance(question, Choice):
        body["criteria"] = dict(question.criteria)
    else:
        body["criteria"] = list(question.criteria)
    return body


def _answer(question: Question, given: Mapping[str, Any]) -> Answer:
    """A validated System One answer as the public answer; the server's own numbers are kept."""
    if isinstance(question, Noul):
        # The reader let these through within float noise of [0, 1]: held inside it.
        yes = clamped(given["noul"])
        no = 1.0 - yes
        return NoulAnswer(
            yes, {"yes": yes, "no": no}, choice_confidence([yes, no]), METHOD, systemone.SURFACE
        )
    confidence = clamped(given["confidence"])
    if isinstance(question, Choice):
        probabilities = {option: float(given["probabilities"][option]) for option in question.options}
        return ChoiceAnswer(given["choice"], probabilities, confidence, METHOD, systemone.SURFACE)
    levels = range(len(question.criteria))
    return ScoreAnswer(
        float(given["score"]),
        {i: float(given["probabilities"][str(i)]) for i in levels},
        {i: given["legend"][str(i)] for i in levels},
        confidence,
        METHOD,
        systemone.SURFACE,
    )
