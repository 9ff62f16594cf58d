"""The surface-blind core: one question in, one answer out, as a generator of requests.

The engine never performs I/O. It yields a ``Call`` and is sent back the ``WireResult`` (or thrown
the ``ProviderError``); the blocking and the async client drive the same generator, so both behave
alike by construction.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field, replace

from jevper._ask import (
    MAX_LABELS,
    Ask,
    Kind,
    answer_budget,
    ask,
    json_prefill,
    label_grammar,
    render_example,
)
from jevper._distribution import make_answer
from jevper._errors import (
    IncompleteAnswerError,
    LabelReadoutError,
    MalformedAnswerError,
    ProviderError,
    UnsupportedMethodError,
)
from jevper._memory import FALLBACK_SURFACE, Memory
from jevper._options import Options
from jevper._prompt import StateTurns, derived_cache_key, layout, state_turns
from jevper._readout import Unreadable, read_json, read_labels
from jevper._rounds import in_rounds, is_wide
from jevper._wire import PROMPT_RECORDS, PromptSurface, Turn, WireRequest, WireResult, prompt_record
from jevper._wire.messages import with_prefill
from jevper.models import Answer, Example
from jevper.questions import Choice, Question

#: Where a prefilled answer stops: an object closed at the end of a line (a raw newline cannot sit
#: inside a JSON string). SmolLM2 writes on after its object, copying the prompt's JSON schema up to
#: the 1024-token budget (70 s a call on two cores, past the 60 s timeout on a slower CPU).
OBJECT_END = ("}\n",)


@dataclass(frozen=True)
class Call:
    surface: PromptSurface
    request: WireRequest


@dataclass
class Trail:
    """What happened to one question, for ``response.debug``."""

    requests: int = 0
    why: list[str] = field(default_factory=list)
    results: list[WireResult] = field(default_factory=list)
    prefill: str | None = None  # the answer opening sent on the Messages surface
    prefill_replies: list[str] = field(default_factory=list)  # per reply: echoed, continued or fresh


@dataclass(frozen=True)
class Answered:
    answer: Answer
    trail: Trail
    surface: PromptSurface
    method: str


class _Move(Exception):
    """api="auto": this surface cannot carry what was asked; the model moves to FALLBACK_SURFACE."""


class _Structured(Exception):
    """method="auto": no distribution on this surface; answer in JSON and remember it."""


class _Discrete(Exception):
    """method="auto": the structured JSON answer could not be read; ask for one option and remember it."""


Step = Generator[Call, WireResult, Answered]


#: A question moves surface at most once, falls back to JSON at most once and to discrete at most once.
_MAX_ROUNDS = 4


def answer(question: Question, state: StateTurns, settings: Options, memory: Memory, qid: str) -> Step:
    if isinstance(question, Choice) and is_wide(question) and _reads_labels(settings, memory):
        return (yield from _wide(question, state, settings, memory, qid))
    trail = Trail()
    tried: set[tuple[PromptSurface, Kind]] = set()
    for _ in range(_MAX_ROUNDS):
        surface = _surface(settings, memory)
        kind = _kind(question, settings, memory, surface, trail)
        if (surface, kind) in tried:
            break  # memory changed under us (another thread); do not ask the same way twice
        tried.add((surface, kind))
        try:
            if kind == "label":
                raw, result, method = yield from _label(
                    question, state, settings, memory, surface, qid, trail
                )
            else:
                raw, result = yield from _json(question, kind, state, settings, memory, surface, qid, trail)
                method = kind
        except _Move as move:
            why = f"{surface} → {FALLBACK_SURFACE}: {move}"
            memory.move(settings.model, FALLBACK_SURFACE, why)
            trail.why.append(why)
            continue
        except _Structured as fallback:
            why = f"no distribution on {surface}: {fallback}"
            memory.judge(settings.model, surface, "structured", why)
            trail.why.append(why)
            continue
        except _Discrete as unreadable:
            why = f"structured JSON unreadable on {surface} ({unreadable}): answered with discrete"
            memory.fall_back(settings.model, surface, why)
            trail.why.append(why)
            continue
        if kind == "label" and settings.method == "auto":
            memory.judge(settings.model, surface, "logprobs", "a real distribution came back")
        built = make_answer(
            question,
            raw,
            normalize=settings.normalize_probabilities,
            method=method,
            surface=surface,
            reasoning=result.reasoning,
        )
        return Answered(built, trail, surface, method)
    raise LabelReadoutError(
        f"question {qid!r}: expected a surface and method to settle, got {'; '.join(trail.why)}; "
        "set api= and method= explicitly"
    )


def _wide(question: Choice, state: StateTurns, settings: Options, memory: Memory, qid: str) -> Step:
    """A Choice wider than the labels, read in rounds of label readouts (``jevper._rounds``); each
    question of the rounds is answered as any other, so its own fallbacks hold."""

    def one(sub: Choice, traced_as: str) -> Step:
        # Traced under an id of its own: a worked example answers the whole question, not a group.
        return answer(sub, state, settings, memory, traced_as)

    distribution, asked = yield from in_rounds(question, one, qid)
    last = asked[-1]
    built = make_answer(
        question, distribution, normalize=True, method=last.method, surface=last.surface, reasoning=None
    )
    why = [f"{len(question.options)} options exceed the {MAX_LABELS} labels: answered in rounds of readouts"]
    why += [w for a in asked for w in a.trail.why if w not in why]
    trail = Trail(
        requests=sum(a.trail.requests for a in asked),
        why=why,
        results=[r for a in asked for r in a.trail.results],
    )
    return Answered(built, trail, last.surface, last.method)


def _reads_labels(settings: Options, memory: Memory) -> bool:
    """Whether a question of at most MAX_LABELS options would be read by labels now (``_kind``'s rule):
    a wider one is then read in rounds, and otherwise answered whole in JSON."""
    method = settings.method
    if method in ("logprobs", "grammar"):
        return True  # a surface without logprobs refuses each question of the rounds, as it would one
    if method != "auto":
        return False
    surface = _surface(settings, memory)
    if not PROMPT_RECORDS[surface].logprobs:
        return False
    verdict = memory.verdict(settings.model, surface)
    return verdict is None or verdict.value != "structured"


def _surface(settings: Options, memory: Memory) -> PromptSurface:
    api = settings.api
    if api == "auto":
        return memory.route(settings.model)
    if api not in PROMPT_RECORDS:
        raise AssertionError("System One answers a whole call in one request (jevper._native)")
    return prompt_record(api).name


def _kind(
    question: Question, settings: Options, memory: Memory, surface: PromptSurface, trail: Trail
) -> Kind:
    method = settings.method
    if method in ("structured", "discrete"):
        return "structured" if method == "structured" else "discrete"
    carrier = PROMPT_RECORDS[surface]
    if method in ("logprobs", "grammar"):
        if not carrier.logprobs:
            raise UnsupportedMethodError(
                f"method={method!r}: expected a surface that carries logprobs, got api={surface!r} (the "
                f"{carrier.title} API has no logprob field); use method='structured' or 'discrete'"
            )
        return "label"
    if not carrier.logprobs:
        _once(trail, f"{surface} carries no logprobs: answered with structured")
    elif len(question.options) > MAX_LABELS:
        _once(
            trail, f"{len(question.options)} options exceed the {MAX_LABELS} labels: answered with structured"
        )
    else:
        verdict = memory.verdict(settings.model, surface)
        if verdict is None or verdict.value != "structured":
            return "label"
        _once(trail, f"remembered: {verdict.why}")
    one_hot = memory.discrete(settings.model, surface)
    if one_hot is not None:
        _once(trail, f"remembered: {one_hot.why}")
        return "discrete"
    return "structured"


def _once(trail: Trail, why: str) -> None:
    if why not in trail.why:
        trail.why.append(why)


def _request(
    a: Ask,
    question: Question,
    state: StateTurns,
    settings: Options,
    qid: str,
    *,
    max_tokens: int | None = None,
) -> WireRequest:
    examples = _examples(a, question, settings.examples, qid)
    prompt = layout(a.system, examples, a.question, state)
    key = settings.prompt_cache_key or derived_cache_key(
        settings.model, a.kind, a.system, examples or "", a.question
    )
    reasoning = settings.reasoning
    return WireRequest(
        model=settings.model,
        system=prompt.system,
        turns=prompt.turns,
        logprobs=a.kind == "label",
        top_logprobs=settings.top_logprobs,
        # structured_outputs=False: never a schema or a grammar (the JSON ask still names its shape in words).
        grammar=a.grammar if settings.structured_outputs else None,
        schema=a.schema if settings.structured_outputs else None,
        prompt_cache_key=key,
        reasoning_effort=reasoning.effort if reasoning else None,
        reasoning_summary=reasoning.summary if reasoning else None,
        thinking_budget=reasoning.budget_tokens if reasoning else None,
        extra_body=settings.extra_body,
        max_tokens=max_tokens,
    )


def _examples(a: Ask, question: Question, examples: tuple[Example, ...], qid: str) -> str | None:
    shown = []
    for example in examples:
        if qid not in example.answers:
            continue
        state = state_turns(example.state)
        text = "\n".join(t.content if t.role == "user" else f"{t.role}: {t.content}" for t in state.turns)
        shown.append(f"{text}\nAnswer: {render_example(question, a.kind, example.answers[qid], a.labels)}")
    if not shown:
        return None
    return "Worked examples of states and their right answers:\n\n" + "\n\n".join(shown)


def _send(
    surface: PromptSurface, request: WireRequest, trail: Trail
) -> Generator[Call, WireResult, WireResult]:
    trail.requests += 1
    result = yield Call(surface, request)
    trail.results.append(result)
    if request.prefill is not None and result.text is not None:
        text, how = with_prefill(result.text, request.prefill)
        trail.prefill_replies.append(how)
        result = replace(result, text=text)
    if result.text is not None and result.stop_sequence is not None and result.stop_sequence in request.stop:
        # The server leaves the stop sequence out of the text; it is the end of the answer's object.
        result = replace(result, text=result.text + result.stop_sequence)
    return result


def _prefill(
    a: Ask, request: WireRequest, settings: Options, surface: PromptSurface, trail: Trail
) -> str | None:
    """The answer opening to send, or None: where the surface takes one, and never alongside thinking."""
    if not PROMPT_RECORDS[surface].prefill or not settings.prefill:
        return None
    if request.thinking_budget is not None or "thinking" in settings.extra_body:
        _once(trail, "no prefill: thinking was requested, and the API refuses a prefill with thinking")
        return None
    if request.turns and request.turns[-1].role == "assistant":
        _once(trail, "no prefill: the state ends with an assistant turn")
        return None
    trail.prefill = json_prefill(a)
    return trail.prefill


def _caller_field(error: ProviderError, settings: Options) -> ProviderError:
    """A refusal of a field the caller put in extra_body is reported as the caller's own."""
    if error.kind != "field_refused" or error.field not in settings.extra_body:
        return error
    refused = ProviderError(
        f"the server refused the caller's extra_body field {error.field!r} ({error.status}): "
        f"{error.server_message!r}; omit the field or send it with the type the server expects",
        status=error.status,
        server_message=error.server_message,
        kind=error.kind,
        field=error.field,
    )
    return refused


def _label(
    question: Question,
    state: StateTurns,
    settings: Options,
    memory: Memory,
    surface: PromptSurface,
    qid: str,
    trail: Trail,
) -> Generator[Call, WireResult, tuple[dict[str, float], WireResult, str]]:
    # method="auto" sends the label grammar from the first request: a server that honours it (llama.cpp)
    # answers with one label and stops, where a small model left free writes prose to the end of its slot
    # (SmolLM2 on two cores: past 60 s) and costs a corrective retry; servers without grammar support
    # ignore the field, and one that refuses it is asked without it, once and for the client's life.
    constrained = settings.method == "grammar" or (
        settings.method == "auto"
        and settings.structured_outputs
        and "grammar" not in memory.omitted(settings.model, surface)
    )
    method = "grammar" if constrained else "logprobs"
    a = ask(question, "label", grammar=constrained)
    budget = _label_budget(a.grammar, settings, memory, surface)
    request = _request(a, question, state, settings, qid, max_tokens=budget)
    try:
        try:
            result = yield from _send(surface, request, trail)
        except ProviderError as error:
            if not (settings.method == "auto" and constrained and _refused_grammar(error)):
                raise
            why = f"{error.status} {error.server_message!r}"
            memory.limit(settings.model, surface, "grammar", why)
            trail.why.append(f"dropped grammar: {why}")
            a = ask(question, "label")
            request, method = replace(request, grammar=None, max_tokens=None), "logprobs"
            result = yield from _send(surface, request, trail)
        raw = read_labels(result, a)
        _held(request, result, a, settings, memory, surface)
        return raw, result, method
    except ProviderError as error:
        _no_distribution_route(error, settings, surface)
        raise _caller_field(error, settings) from None
    except Unreadable as unreadable:
        if unreadable.why == "no_distribution":
            _no_distribution(str(unreadable), settings, surface)
        first = unreadable
    if settings.n_retry_malformed == 0:
        raise LabelReadoutError(
            f"{first}; not asked again (n_retry_malformed=0) — allow a corrective retry, or use "
            "method='structured'"
        ) from None
    # Corrective retries (n_retry_malformed of them), continuing the same conversation so the prefix
    # stays cached. Under method="auto" they carry the label grammar unless the server refused it (or
    # structured_outputs=False).
    refused = "grammar" in memory.omitted(settings.model, surface)
    retry_grammar = a.grammar or (
        label_grammar(a.labels)
        if settings.method == "auto" and settings.structured_outputs and not refused
        else None
    )
    correction = (
        f"Your reply must be exactly one of the letters {', '.join(a.labels)}. Reply with the letter only."
    )
    retries = settings.n_retry_malformed
    spelled = "one corrective retry" if retries == 1 else f"{retries} corrective retries"
    last, latest = request, result
    for attempt in range(retries):
        previous = (Turn("assistant", latest.text),) if latest.text else ()
        last = replace(
            last,
            turns=(*last.turns, *previous, Turn("user", correction)),
            grammar=retry_grammar,
            max_tokens=_label_budget(retry_grammar, settings, memory, surface),
        )
        trail.why.append(f"corrective retry: {first}" if attempt == 0 else f"corrective retry {attempt + 1}")
        try:
            latest = yield from _send(surface, last, trail)
            raw = read_labels(latest, a)
        except ProviderError as error:
            raise LabelReadoutError(
                f"{first}; a corrective retry was refused by the server: {error.server_message!r}; "
                "use method='structured'"
            ) from error
        except Unreadable as again:
            if attempt + 1 < retries:
                continue
            raise LabelReadoutError(
                f"{again} after {spelled} (first reply: {first}); the model answers prose here — "
                "use method='structured', or a server that honours method='grammar' (llama.cpp)"
            ) from None
        return raw, latest, "grammar" if retry_grammar else method
    raise AssertionError("unreachable: the loop returns or raises")


#: The output budget of a label under a grammar the server holds to: one letter is one token. Without
#: it llama.cpp decodes once more, for the end the grammar then forces (predicted_n 2 in its timings).
#: The batch engine on b11549, four slots, 200 one-question rows, four alternating rounds: 8.9-9.2 rows/s
#: without the budget, 13.1-14.9 with it, the same choices (2026-12-01).
LABEL_BUDGET = 1


def _label_budget(
    grammar: str | None, settings: Options, memory: Memory, surface: PromptSurface
) -> int | None:
    """The label budget for a request that carries ``grammar``, where the grammar has held on this model
    and surface before; None elsewhere.

    Only there: a server that ignores the grammar may open its reply with a blank or a reasoning token,
    and a budget of one would leave no label to read. A caller's own max_tokens in extra_body wins."""
    held = grammar is not None and memory.grammar_held(settings.model, surface)
    return LABEL_BUDGET if held else None


def _held(
    request: WireRequest,
    result: WireResult,
    a: Ask,
    settings: Options,
    memory: Memory,
    surface: PromptSurface,
) -> None:
    """Remember that the grammar held: the reply is exactly one label, ended by the server, no trace."""
    if request.grammar is None or memory.grammar_held(settings.model, surface):
        return
    if result.text in a.labels and result.reasoning is None and result.truncated_by is None:
        memory.hold(settings.model, surface)


def _refused_grammar(error: ProviderError) -> bool:
    return error.kind == "field_refused" and error.field == "grammar"


def _no_distribution_route(error: ProviderError, settings: Options, surface: PromptSurface) -> None:
    # A refusal of the caller's own top_logprobs value is theirs to fix; only a route that will not
    # carry logprobs at all moves the readout.
    refused_logprobs = error.kind == "logprobs_refused"
    if error.kind == "missing_route" and settings.api == "auto" and surface != FALLBACK_SURFACE:
        raise _Move(f"the route is missing ({_said(error)})")
    if refused_logprobs:
        _no_distribution(
            f"the server refused the logprob fields ({_said(error)})",
            settings,
            surface,
        )


def _no_distribution(why: str, settings: Options, surface: PromptSurface) -> None:
    if settings.api == "auto" and surface != FALLBACK_SURFACE:
        raise _Move(f"the label readout needs a distribution: {why}")
    if settings.method == "auto":
        raise _Structured(why)
    raise LabelReadoutError(f"{why}; this surface returns no distribution — use method='structured'")


def _json(
    question: Question,
    kind: Kind,
    state: StateTurns,
    settings: Options,
    memory: Memory,
    surface: PromptSurface,
    qid: str,
    trail: Trail,
) -> Generator[Call, WireResult, tuple[dict[str, float], WireResult]]:
    a = ask(question, kind)
    request = replace(
        _request(a, question, state, settings, qid), omit=memory.omitted(settings.model, surface)
    )
    prefill = _prefill(a, request, settings, surface, trail)
    if prefill is not None:
        # The reply is the answer's object and nothing else: it ends where a line closes an object,
        # within a budget sized to that object (a caller's max_tokens still wins).
        request = replace(request, prefill=prefill, stop=OBJECT_END, max_tokens=answer_budget(a))
    # Under method="auto", a structured answer that cannot be read is asked again as discrete (one
    # option, a one-hot distribution): a weak model that cannot write probabilities can often name an
    # option, and a server that enforces no schema leaves nothing else to try.
    falls_back = settings.method == "auto" and kind == "structured"
    # The corrective retry continues the request as it was last sent: a field the server refused and
    # jevper dropped stays dropped.
    request, result = yield from _send_dropping(request, settings, memory, surface, trail)
    try:
        return _read_json(result, a, request, falls_back), result
    except Unreadable as unreadable:
        first = unreadable
    retries = settings.n_retry_malformed
    spelled = "one corrective retry" if retries == 1 else f"{retries} corrective retries"
    last: Unreadable = first
    for attempt in range(retries):
        trail.why.append(f"corrective retry: {last}" if attempt == 0 else f"corrective retry {attempt + 1}")
        correction = f"That reply was not a valid answer: {last}. Reply with the JSON object only."
        previous = (Turn("assistant", result.text),) if result.text else ()
        request = replace(request, turns=(*request.turns, *previous, Turn("user", correction)))
        request, result = yield from _send_dropping(request, settings, memory, surface, trail)
        try:
            return _read_json(result, a, request, falls_back), result
        except Unreadable as again:
            last = again
    if falls_back:
        raise _Discrete(f"{last} after {spelled}" if retries else str(last)) from None
    raise MalformedAnswerError(
        f"{surface}: {last} after {spelled} (first reply: {first}); "
        "use a stronger model, or method='logprobs' where the server carries logprobs"
        if retries
        else f"{surface}: {first}; not asked again (n_retry_malformed=0) — allow a corrective retry, or "
        "use method='logprobs' where the server carries logprobs"
    ) from None


def _read_json(result: WireResult, a: Ask, request: WireRequest, falls_back: bool) -> dict[str, float]:
    """Read a JSON answer; one that ran past the budget while writing answer text may fall back.

    A reply cut off while thinking (no answer text) stays an IncompleteAnswerError: a discrete
    question would spend its budget the same way.
    """
    try:
        return read_json(result, a, opened=request.prefill is not None)
    except IncompleteAnswerError as cut:
        if falls_back and (result.text or "").strip():
            raise _Discrete(f"the answer ran past the output budget ({cut.finish!r})") from None
        raise


def _send_dropping(
    request: WireRequest, settings: Options, memory: Memory, surface: PromptSurface, trail: Trail
) -> Generator[Call, WireResult, tuple[WireRequest, WireResult]]:
    """Send; a 400 for a field the surface lets drop (Messages: output_config, thinking) drops it once.
    Returns the request as it was answered (without the dropped field) and its result."""
    try:
        return request, (yield from _send(surface, request, trail))
    except ProviderError as error:
        droppable = (
            error.status == 400
            and error.field in PROMPT_RECORDS[surface].droppable
            and error.field not in request.omit
            and error.field not in settings.extra_body
        )
        if droppable and error.field is not None:
            why = f"{error.status} {error.server_message!r}"
            memory.limit(settings.model, surface, error.field, why)
            trail.why.append(f"dropped {error.field}: {why}")
            dropped = replace(request, omit=request.omit | {error.field})
            try:
                return dropped, (yield from _send(surface, dropped, trail))
            except ProviderError as again:
                raise _caller_field(again, settings) from None
        _no_distribution_route_json(error, settings, surface)
        raise _caller_field(error, settings) from None


def _no_distribution_route_json(error: ProviderError, settings: Options, surface: PromptSurface) -> None:
    if error.kind == "missing_route" and settings.api == "auto" and surface != FALLBACK_SURFACE:
        raise _Move(f"the route is missing ({_said(error)})")


def _said(error: ProviderError) -> str:
    words = repr(error.server_message)
    return words if error.status is None else f"{error.status} {words}"
