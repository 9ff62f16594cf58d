"""Named classifiers: each turns a probe's recorded exchanges into (outcome, verdict, evidence).

A probe names its classifier in the catalogue; `CLASSIFIERS` is filled by the `@classifier`
decorator, so a test can check that every name the catalogue uses exists and every classifier is used.
Bodies are read through `jevper._wire`, the same readers the client uses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from jevper._errors import JevperError, MalformedAnswerError
from jevper._failure import judge
from jevper._wire import (
    PROMPT_RECORDS,
    ErrorBody,
    WireResult,
    embedded_error,
    prompt_record,
    provider_error,
    read,
    read_error,
)
from jevper._wire import decisions as decisions_route
from jevper._wire import systemone as systemone_route
from jevper._wire.systemone import body_violations
from jevper.probe import confidence, dialects
from jevper.probe import stability as stability_
from jevper.probe.cassettes import Exchange
from jevper.probe.catalogue import Probe
from jevper.probe.prompts import LABELS, ROTATIONS
from jevper.probe.recording import Grade, Outcome
from jevper.probe.text import excerpt, expected_actual, plural, words

CANARY = "JEVPER-PROBE"


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    text: str  # the matrix cell
    evidence: str  # a short excerpt of what came back
    # The decisive facts, keyed by agreement rule (agreement.RULES), compared with the reference.
    facts: Mapping[str, Any] = field(default_factory=dict)
    # Against a specification, where one exists: "fail" for an answer that breaks it (recording.Grade).
    grade: Grade | None = None
    # A stability probe's numbers and grade (stability.Measure.to_json), kept in results.json.
    stability: Mapping[str, Any] | None = None


Classifier = Callable[[Probe, Sequence[Exchange]], Verdict]
CLASSIFIERS: dict[str, Classifier] = {}


def classifier(fn: Classifier) -> Classifier:
    CLASSIFIERS[fn.__name__] = fn
    return fn


#: A classifier of an answer: the probe, its last exchange, that exchange read by the surface's own
#: reader, and every exchange of the probe (a primer first).
AnswerClassifier = Callable[[Probe, Exchange, WireResult, Sequence[Exchange]], Verdict]


def on_answer(
    refusal: str = "refused", *, on_404: str | None = None
) -> Callable[[AnswerClassifier], Classifier]:
    """Register a classifier of a 200 answer: any other status is a refusal in the server's own words
    (said as `refusal`, or `on_404` for a 404), and the answer is read through ``jevper._wire``."""

    def register(fn: AnswerClassifier) -> Classifier:
        def classify_answer(probe: Probe, exchanges: Sequence[Exchange]) -> Verdict:
            last = exchanges[-1]
            if last.status != 200:
                return _refused(last, on_404 if on_404 and last.status == 404 else refusal)
            return fn(probe, last, _wire(probe, last), exchanges)

        classify_answer.__name__ = fn.__name__
        classify_answer.__doc__ = fn.__doc__
        return classifier(classify_answer)

    return register


def classify(probe: Probe, exchanges: Sequence[Exchange], dialect: str | None = None) -> Verdict:
    """The verdict for one probe; a probe with no exchange, or a body no reader takes, is a fault.

    `dialect` is the body the server speaks on the probe's route, when its dialect probe found one
    (``dialects``): the probe is read by that dialect's rules where they differ from its own."""
    if not exchanges:
        return Verdict("fault", "no exchange was recorded", "")
    last = exchanges[-1]
    if last.status != 200 and judge(provider_error(_error(last), probe.surface)).retry:
        # "Not now" (overload, a proxy's failure) says nothing about the probed feature; it is no refusal.
        return Verdict("fault", f"{last.status}: the server was unavailable, try again", excerpt(last.text))
    status = {"status": last.status, "status-class": f"{last.status // 100}xx"}
    name = probe.classifier
    read = dialects.reading(dialect, probe, last)
    if read == "another shape":
        said = f"another shape: the server speaks {dialect} body here, not {dialects.NATIVE[probe.surface]}"
        verdict = Verdict(
            "info",
            f"{said} ({last.status} {words(_error(last).message)})",
            excerpt(last.text),
            {"dialect": dialect},
        )
        return replace(verdict, facts={**status, **verdict.facts})
    if read == "refused in the dialect":
        verdict = _refused(last)
        verdict = replace(verdict, text=f"{verdict.text} (in {dialect} dialect: OpenAI's envelope not asked)")
        return replace(verdict, facts={**status, **verdict.facts})
    if read == "valid in the dialect":
        name = "systemone_conformance"
    try:
        verdict = CLASSIFIERS[name](probe, exchanges)
    except JevperError as exc:
        return Verdict("fault", f"{last.status}, unreadable body: {exc}", excerpt(last.text))
    if read is not None:
        verdict = replace(verdict, text=f"{verdict.text} (valid in {dialect} dialect)")
    return replace(verdict, facts={**status, **verdict.facts})


# --- reading helpers -------------------------------------------------------------------------------


def _model(exchange: Exchange) -> str | None:
    body = exchange.request_body
    return body.get("model") if isinstance(body, Mapping) else None


def _error(exchange: Exchange) -> ErrorBody:
    return read_error(exchange.status, exchange.text, model=_model(exchange))


def _answers_excerpt(body: object, last: Exchange) -> str:
    """What a verdict on a native surface shows: the body's answers, or the whole body without them."""
    answers = body.get("answers") if isinstance(body, Mapping) else None
    return excerpt(answers if answers is not None else last.text)


def _off_the_api(found: Sequence[str], shown: str) -> Verdict:
    """A 200 whose body breaks the API: its first violation, and how many more."""
    more = f" (and {plural(len(found) - 1, 'more')})" if len(found) > 1 else ""
    return Verdict("info", f"200, but not the API's answer: {found[0]}{more}", shown, grade="fail")


def _refused(exchange: Exchange, prefix: str = "refused") -> Verdict:
    error = _error(exchange)
    return Verdict("refused", f"{prefix}: {exchange.status} {words(error.message)}", excerpt(exchange.text))


def _wire(probe: Probe, exchange: Exchange) -> WireResult:
    body = exchange.json()
    if not isinstance(body, Mapping):
        raise MalformedAnswerError(expected_actual("a JSON object", excerpt(exchange.text, 60)))
    if probe.surface not in PROMPT_RECORDS:  # System One: read whole by body_violations, not here
        raise MalformedAnswerError(expected_actual("a prompt surface's answer", "a System One body"))
    carrier = prompt_record(probe.surface)
    result = read(carrier.name, body, model=_model(exchange))
    # Where the surface puts its answer; an empty list there is no answer, whatever the probe asked about.
    key = carrier.answer_list
    if body.get(key) == []:
        # Not "no logprobs here" nor "taken": an empty answer says nothing about the probed feature.
        raise MalformedAnswerError(
            expected_actual(f"an answer in {key}", f"{key}: [] (finished as {result.finish!r})")
        )
    return result


def _asked(exchange: Exchange, field: str) -> Any:
    body = exchange.request_body
    return body.get(field) if isinstance(body, Mapping) else None


def _is_label(token: str) -> bool:
    return token.strip() in LABELS


def _trace(result: WireResult) -> str:
    if result.reasoning is None:
        return "no trace"
    return f"trace in {result.reasoning_field} ({plural(len(result.reasoning), 'character')})"


def _answer(result: WireResult) -> str:
    return json.dumps(excerpt(result.text or "", 60), ensure_ascii=False)


# --- classifiers -----------------------------------------------------------------------------------


@on_answer()
def answer_alternatives(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """How many alternatives the first answer token carries, and whether the labels are among them."""
    asked = _asked(last, "top_logprobs")
    asked_text = f"asked for {asked}" if asked is not None else "none asked for"
    none = {"alternatives": 0}
    if result.logprobs is None:
        return Verdict(
            "ignored", f"accepted, but no logprobs came back ({asked_text})", excerpt(last.text), none
        )
    if not result.logprobs:
        return Verdict("ignored", f"an empty logprob list ({asked_text})", excerpt(last.text), none)
    first = result.logprobs[0]
    labels = sorted({t.strip() for t, _ in first.top if _is_label(t)})
    among = (
        f"{'label' if len(labels) == 1 else 'labels'} {', '.join(labels)} among them"
        if labels
        else "no label among them"
    )
    tops = ", ".join(repr(t) for t, _ in first.top[:6])
    return Verdict(
        "supported",
        f"{plural(len(first.top), 'alternative')} ({asked_text}); {among}",
        f"first token {first.token!r}; alternatives {tops}{'…' if len(first.top) > 6 else ''}",
        {"alternatives": len(first.top)},
    )


@on_answer()
def tops_without_logprobs(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """top_logprobs sent alone: refused, or accepted with or without logprobs."""
    if result.logprobs:
        count = len(result.logprobs[0].top)
        return Verdict(
            "supported",
            f"accepted; logprobs sent anyway ({plural(count, 'alternative')})",
            excerpt(last.text),
        )
    return Verdict("ignored", "accepted; no logprobs without logprobs: true", excerpt(last.text))


@on_answer()
def per_token_entries(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """One logprob entry per generated token? How did the answer end, and what came after its text?"""
    if not result.logprobs:
        return Verdict(
            "ignored", "no logprob entries came back", excerpt(last.text), {"trailing": "no entries"}
        )
    entries = result.logprobs
    completion = result.usage.completion_tokens
    counted = f" for {plural(completion, 'completion token')}" if completion is not None else ""
    trailing = trailing_tokens([e.token for e in entries], result.text or "")
    fact: Any = trailing
    if trailing:
        tail = f"trailing non-text tokens {trailing!r}"
    elif result.finish == "length":
        tail = "no trailing token: the answer was cut at the budget, so no end-of-turn could follow"
        fact = "cut at the budget"
    else:
        tail = "no trailing non-text token"
    text = result.text or ""
    return Verdict(
        "info",
        f"{plural(len(entries), 'entry')}{counted}; finish_reason {result.finish}; {tail}",
        f"last tokens {[e.token for e in entries[-3:]]!r}; text ends {json.dumps(text[-30:])}",
        {"trailing": fact},
    )


def trailing_tokens(tokens: Sequence[str], text: str) -> list[str]:
    """The entries after the ones that spell the answer text (an end-of-turn marker, an empty token)."""
    joined = ""
    trailing: list[str] = []
    for token in tokens:
        if len(joined) >= len(text) and text.startswith(joined):
            trailing.append(token)
        joined += token
    return trailing


@on_answer()
def first_token(probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]) -> Verdict:
    """Is the first generated token a label, and where did any reasoning trace go?"""
    trace = {"trace": result.reasoning_field or "none"}
    if not result.logprobs:
        start = "no logprobs" if result.logprobs is None else "an empty logprob list"
        return Verdict(
            "info", f"{start}; answer {_answer(result)}; {_trace(result)}", excerpt(last.text), trace
        )
    token = result.logprobs[0].token
    kind = "a label" if _is_label(token) else "not a label"
    return Verdict(
        "info",
        f"first token {token!r} is {kind}; {_trace(result)}",
        f"answer {_answer(result)}",
        trace,
    )


@classifier
def unknown_model(probe: Probe, exchanges: Sequence[Exchange]) -> Verdict:
    """A 404 that names the model, a 200 that ignored it, or another refusal."""
    last = exchanges[-1]
    if last.status == 200:
        answered = last.json()
        served = answered.get("model") if isinstance(answered, Mapping) else None
        return Verdict("ignored", f"ignored, 200 (answered as {served!r})", excerpt(last.text))
    error = _error(last)
    naming = "naming the model" if error.names_model else "not naming the model"
    return Verdict("refused", f"{last.status} {naming}: {words(error.message)}", excerpt(last.text))


_SHAPES = {
    "object": '{"error": …}',
    "detail": '{"detail": …}',
    "string": "a bare JSON string",
    "text": "plain text",
    "empty": "an empty body",
}


@classifier
def error_shape(probe: Probe, exchanges: Sequence[Exchange]) -> Verdict:
    """The status and the shape of the body a refusal arrives in."""
    last = exchanges[-1]
    error = _error(last)
    if last.status == 200:
        body = last.json()
        if isinstance(body, Mapping) and body.get("error"):
            return Verdict(
                "info",
                f"200 with an embedded error: {words(error.message)}",
                excerpt(last.text),
                {"body-shape": "embedded error"},
            )
        return Verdict(
            "ignored", "200, answered as if nothing was wrong", excerpt(last.text), {"body-shape": "answer"}
        )
    return Verdict(
        "refused",
        f"{last.status}, {_SHAPES[error.shape]}: {words(error.message)}",
        excerpt(last.text),
        {"body-shape": error.shape},
    )


@on_answer()
def choices_count(probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]) -> Verdict:
    """How many choices came back for n: 2."""
    asked = _asked(last, "n")
    outcome: Outcome = "supported" if result.choices == asked else "ignored"
    return Verdict(
        outcome,
        f"accepted, {plural(result.choices, 'choice')} back",
        excerpt(last.text),
        {"choices": result.choices},
    )


@on_answer()
def accepted_or_refused(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """A field or turn the server either takes (200) or refuses in its own words."""
    return Verdict("supported", f"accepted, 200; answer {_answer(result)}", excerpt(last.text))


@on_answer()
def ignored_or_refused(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """A field with no visible effect when taken: ignored (200) or refused in the server's words."""
    return Verdict("ignored", f"accepted and ignored, 200; answer {_answer(result)}", excerpt(last.text))


@on_answer()
def grammar_obeyed(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """Does the answer obey a grammar that allows only the labels?"""
    if result.text is not None and result.text.strip() in LABELS:
        return Verdict("supported", f"honoured: the answer is {_answer(result)}", excerpt(last.text))
    return Verdict(
        "ignored",
        f"ignored: {expected_actual('one of A, B, C', _answer(result))}",
        excerpt(last.text),
    )


#: How each surface says an answer stopped at its token budget (Chat, Responses, Messages).
CUT_AT_BUDGET = frozenset({"length", "incomplete", "max_tokens"})


def _opens_with_canary(text: str) -> bool:
    return "".join(text.split()).startswith(json.dumps({"canary": CANARY}, separators=(",", ":"))[:-1])


@on_answer()
def schema_canary(probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]) -> Verdict:
    """A schema whose only legal answer names a constant the prompt never mentions: enforced?"""
    try:
        answer = json.loads(result.text or "")
    except json.JSONDecodeError:
        answer = None
    if isinstance(answer, Mapping) and answer.get("canary") == CANARY:
        return Verdict("supported", f"enforced: the answer names {CANARY}", f"answer {_answer(result)}")
    if result.finish in CUT_AT_BUDGET and _opens_with_canary(result.text or ""):
        # The prompt never names the constant, so a cut answer that opens with it came from the schema.
        return Verdict(
            "supported",
            f"enforced (cut at the budget, {result.finish}): the answer opens with the canary {CANARY}",
            f"answer {_answer(result)}",
        )
    return Verdict(
        "ignored",
        f"ignored: {expected_actual(json.dumps({'canary': CANARY}), _answer(result))}",
        excerpt(last.text),
    )


@on_answer()
def budget_honoured(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """max_completion_tokens: 1 without max_tokens — did the answer stop at one token?"""
    used = result.usage.completion_tokens
    limit = _asked(last, "max_completion_tokens")
    if used is not None and limit is not None and used <= limit:
        return Verdict("supported", f"honoured: {plural(used, 'completion token')}", excerpt(last.text))
    return Verdict(
        "ignored",
        "ignored: "
        + expected_actual(f"at most {limit} completion token", f"{used} (finish {result.finish})"),
        excerpt(last.text),
    )


@on_answer()
def trace_after_switch(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """A thinking switch was accepted or refused; if accepted, did a trace still arrive?"""
    if result.reasoning is None:
        return Verdict("supported", "accepted; no trace arrived", f"answer {_answer(result)}")
    return Verdict("ignored", f"accepted, but a {_trace(result)} still arrived", excerpt(last.text))


def _cache_paths(result: WireResult) -> list[str]:
    found = []
    if result.usage.cached_tokens_path is not None:
        found.append(f"{result.usage.cached_tokens_path} = {result.usage.cached_tokens}")
    timings = result.raw.get("timings")
    if (
        isinstance(timings, Mapping)
        and "cache_n" in timings
        and result.usage.cached_tokens_path != "timings.cache_n"
    ):
        found.append(f"timings.cache_n = {timings['cache_n']}")
    return found


@on_answer()
def cached_tokens(probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]) -> Verdict:
    """Where the server reports cached prompt tokens, and how many it reported."""
    prompt = result.usage.prompt_tokens
    of = f" of {prompt} prompt tokens" if prompt is not None else ""
    if prompt_record(probe.surface).prompt_tokens_exclude_cached and prompt is not None:
        of = f" (input_tokens = {prompt}, the uncached rest)"
    found = _cache_paths(result)
    if not found:
        return Verdict(
            "info",
            f"no cached-token count reported{of}",
            excerpt(result.raw.get("usage", {})),
            {"cache-field": "unreported", "cache-reuse": "unreported"},
        )
    usage = {
        "usage": result.raw.get("usage"),
        **({"timings": result.raw["timings"]} if "timings" in result.raw else {}),
    }
    cached = result.usage.cached_tokens
    if cached is None and isinstance(result.raw.get("timings"), Mapping):
        cached = result.raw["timings"].get("cache_n")
    facts = {
        "cache-field": result.usage.cached_tokens_path or "timings.cache_n",
        "cache-reuse": "some" if cached else "none",
    }
    return Verdict("info", f"{'; '.join(found)}{of}", excerpt(usage), facts)


@on_answer()
def responses_logprobs(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """Real logprobs on the output_text part, an empty list, or a refusal."""
    if result.logprobs is None:
        return Verdict(
            "ignored", "accepted; no logprobs field on the output", excerpt(last.text), {"logprobs": "absent"}
        )
    if not result.logprobs:
        return Verdict(
            "ignored", "accepted; an empty logprob list", excerpt(last.text), {"logprobs": "empty"}
        )
    count = len(result.logprobs[0].top)
    return Verdict(
        "supported",
        f"real logprobs: {plural(len(result.logprobs), 'entry')}, "
        f"{plural(count, 'alternative')} on the first",
        excerpt([e.token for e in result.logprobs[:6]]),
        {"logprobs": "real"},
    )


@on_answer()
def output_shape(probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]) -> Verdict:
    """The status and the item / part types of a Responses answer."""
    shape = ", ".join(result.content_types) or "nothing"
    return Verdict(
        "supported", f"200; output parts: {shape}; status {result.finish}", f"answer {_answer(result)}"
    )


@on_answer()
def input_parts_seen(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """input_text parts against the string form: the same input token count means the same text."""
    parts = result.usage.prompt_tokens
    baseline = None
    if len(exchanges) > 1 and exchanges[0].status == 200:
        baseline = _wire(probe, exchanges[0]).usage.prompt_tokens
    if parts is not None and parts == baseline:
        return Verdict(
            "supported",
            f"200; the parts reached the model as text ({parts} input tokens, as for the string form)",
            f"answer {_answer(result)}",
        )
    return Verdict(
        "ignored",
        f"200, but {expected_actual(f'{baseline} input tokens (string form)', f'{parts}')}",
        excerpt(last.text),
    )


@on_answer()
def truncation_signal(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """A small max_output_tokens: does the body say the answer was cut?"""
    details = result.raw.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, Mapping) else None
    if result.finish == "incomplete":
        return Verdict(
            "supported",
            f"incomplete / {reason}",
            excerpt({"status": result.finish, "incomplete_details": details}),
        )
    used = result.usage.completion_tokens
    return Verdict(
        "ignored",
        f"{result.finish}, no incomplete_details "
        f"({plural(used or 0, 'output token')}; answer {_answer(result)})",
        excerpt(last.text),
    )


@on_answer(on_404="no route")
def message_blocks(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """Does the Messages route exist; which blocks and stop_reason come back?"""
    blocks = ", ".join(result.content_types) or "none"
    return Verdict(
        "supported",
        f"route exists; blocks: {blocks}; stop_reason {result.finish}",
        f"answer {_answer(result)}",
        {"blocks": list(result.content_types)},
    )


@on_answer()
def thinking_blocks(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """thinking enabled with a budget: refused, ignored, or answered with thinking blocks."""
    blocks = ", ".join(result.content_types) or "none"
    if "thinking" in result.content_types:
        return Verdict("supported", f"accepted; thinking blocks back (blocks: {blocks})", excerpt(last.text))
    return Verdict(
        "ignored",
        f"accepted; no thinking block back (blocks: {blocks}; stop_reason {result.finish})",
        f"answer {_answer(result)}",
    )


@on_answer("required")
def required_or_defaulted(
    probe: Probe, last: Exchange, result: WireResult, exchanges: Sequence[Exchange]
) -> Verdict:
    """max_tokens omitted: required in the server's words, or a default applied."""
    used = result.usage.completion_tokens
    return Verdict(
        "info",
        f"defaulted: answered without it ({plural(used or 0, 'output token')}, stop_reason {result.finish})",
        f"answer {_answer(result)}",
    )


# --- the System One route ---------------------------------------------------------------------------


def _s1_unserved(last: Exchange) -> Verdict | None:
    """No route (404), or a route that will not answer for this model (501): neither says anything
    about the API's rules, and both are said in the server's own words."""
    if last.status == 404:
        return _refused(last, "no route")
    if last.status == 501:
        return _refused(last, "not served for this model")
    return None


@classifier
def systemone_conformance(probe: Probe, exchanges: Sequence[Exchange]) -> Verdict:
    """A 200 checked against the API: every answer typed, a distribution over exactly its options
    summing to 1, the choice at the peak, the score at the expectation, the legend, usage."""
    last = exchanges[-1]
    unserved = _s1_unserved(last)
    if unserved is not None:
        return unserved
    if last.status != 200:
        return _refused(last)
    asked = _asked(last, "questions")
    questions = asked if isinstance(asked, Mapping) else {}
    body = last.json()
    found = body_violations(body, questions)
    shown = _answers_excerpt(body, last)
    if found:
        return _off_the_api(found, shown)
    said = f"200; {plural(len(questions), 'answer')} as the API defines them"
    return Verdict("supported", said, shown, grade="pass")


@classifier
def systemone_invalid(probe: Probe, exchanges: Sequence[Exchange]) -> Verdict:
    """An invalid request: refused as such (400, 422), accepted, or a 5xx (which the API rules out)."""
    last = exchanges[-1]
    unserved = _s1_unserved(last)
    if unserved is not None:
        return unserved
    if last.status == 200:
        return Verdict("ignored", "accepted, 200: the invalid request was answered", excerpt(last.text))
    if last.status >= 500:
        error = _error(last)
        return Verdict(
            "info",
            f"{last.status} for a bad request (the API says 4xx): {words(error.message)}",
            excerpt(last.text),
        )
    return _refused(last)


@classifier
def decision_models(probe: Probe, exchanges: Sequence[Exchange]) -> Verdict:
    """Does GET /v1/models mark a decision model (architecture.output_modalities has "decisions")?"""
    last = exchanges[-1]
    if last.status != 200:
        return _refused(last)
    body = last.json()
    listed = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(listed, list):
        keys = sorted(body) if isinstance(body, Mapping) else []
        return Verdict("info", f"200, not the OpenAI list shape (keys {keys})", excerpt(last.text))
    marked, described = [], []
    for entry in listed:
        if not isinstance(entry, Mapping):
            continue
        architecture = entry.get("architecture")
        outputs = architecture.get("output_modalities") if isinstance(architecture, Mapping) else None
        if isinstance(outputs, list):
            described.append(f"{entry.get('id')}: {outputs}")
            if "decisions" in outputs:
                marked.append(str(entry.get("id")))
    if marked:
        return Verdict("supported", f"decision models marked: {', '.join(marked)}", excerpt(described))
    if described:
        return Verdict("info", f"no decision model ({'; '.join(described)[:80]})", excerpt(described))
    return Verdict("ignored", f"{plural(len(listed), 'model')}, no architecture field", excerpt(last.text))


# --- OpenAI's Decisions route -----------------------------------------------------------------------

#: The keys of OpenAI's error envelope, `{"error": {...}}`, each present (param and code may be null).
ENVELOPE = ("message", "type", "param", "code")


def _d_unserved(last: Exchange) -> Verdict | None:
    """No route (a 404 or 405 that does not name the model asked for), or none for this model (501)."""
    if last.status in (404, 405) and not _error(last).names_model:
        return _refused(last, "no route")
    if last.status == 501:
        return _refused(last, "not served for this model")
    return None


def envelope_violations(exchange: Exchange) -> list[str]:
    """What keeps a refusal from OpenAI's `{"error": {"message", "type", "param", "code"}}` envelope."""
    body = exchange.json()
    if not isinstance(body, Mapping):
        return [f'expected {{"error": {{...}}}}, got {excerpt(exchange.text, 40)!r}']
    error = body.get("error")
    if not isinstance(error, Mapping):
        return [f'expected {{"error": {{...}}}}, got the keys {sorted(body)}']
    found = [f"error.{key}: missing" for key in ENVELOPE if key not in error]
    for key in ("message", "type"):
        if key in error and (not isinstance(error[key], str) or not error[key]):
            found.append(f"error.{key}: expected a non-empty string, got {error[key]!r:.40}")
    for key in ("param", "code"):
        if error.get(key) is not None and not isinstance(error[key], str):
            found.append(f"error.{key}: expected a string or null, got {error[key]!r:.40}")
    return found


def _d_refusal(last: Exchange) -> Verdict:
    """A refusal of a bad request: a 4xx in OpenAI's envelope passes; a 5xx or another body fails."""
    error = _error(last)
    if last.status >= 500:
        return Verdict(
            "info",
            f"{last.status} for a bad request (the API says 4xx): {words(error.message)}",
            excerpt(last.text),
            grade="fail",
        )
    found = envelope_violations(last)
    if found:
        more = f" (and {plural(len(found) - 1, 'more')})" if len(found) > 1 else ""
        return Verdict(
            "refused",
            f"refused: {last.status} {words(error.message)}, "
            f"not in OpenAI's error envelope: {found[0]}{more}",
            excerpt(last.text),
            grade="fail",
        )
    param = f" (param {error.param})" if error.param else ""
    return Verdict(
        "refused", f"refused: {last.status} {words(error.message)}{param}", excerpt(last.text), grade="pass"
    )


@classifier
def decisions_conformance(probe: Probe, exchanges: Sequence[Exchange]) -> Verdict:
    """A 200 graded by the schema: the body validates as the SDK's `Decision`, and its answers match the
    questions in number, order, type and name, each distribution sums to 1, the choice at the peak, the
    score the expectation over its levels, a refusal typed as one."""
    last = exchanges[-1]
    unserved = _d_unserved(last)
    if unserved is not None:
        return unserved
    if last.status != 200:
        return _refused(last)
    asked = _asked(last, "questions")
    questions = [q for q in asked if isinstance(q, Mapping)] if isinstance(asked, list) else []
    body = last.json()
    # A body that is no JSON object, or an error in a 200, says nothing of the route: a fault, as on the
    # other surfaces; a JSON answer off the schema is graded.
    if not isinstance(body, Mapping):
        raise MalformedAnswerError(expected_actual("a JSON object", excerpt(last.text, 60)))
    error = embedded_error(body, model=_model(last)) if "answers" not in body else None
    if error is not None:
        raise provider_error(error, decisions_route.SURFACE)
    found = dialects.decision_schema(body) + decisions_route.body_violations(body, questions)
    shown = _answers_excerpt(body, last)
    if found:
        return _off_the_api(found, shown)
    refused = sum(1 for a in body["answers"] if a.get("type") == "refusal")
    declined = f", {plural(refused, 'refusal')} among them" if refused else ""
    said = f"200; {plural(len(questions), 'answer')} in question order, as the Decision schema says{declined}"
    return Verdict("supported", said, shown, grade="pass")


@classifier
def decisions_invalid(probe: Probe, exchanges: Sequence[Exchange]) -> Verdict:
    """An invalid request: refused with a 4xx in OpenAI's error envelope, answered (200), or a 5xx."""
    last = exchanges[-1]
    unserved = _d_unserved(last)
    if unserved is not None:
        return unserved
    if last.status == 200:
        return Verdict(
            "ignored", "accepted, 200: the invalid request was answered", excerpt(last.text), grade="fail"
        )
    return _d_refusal(last)


@classifier
def decisions_unknown_model(probe: Probe, exchanges: Sequence[Exchange]) -> Verdict:
    """A model the server does not have: refused in OpenAI's envelope (naming it, or not), or answered."""
    last = exchanges[-1]
    unserved = _d_unserved(last)
    if unserved is not None:
        return unserved
    if last.status == 200:
        answered = last.json()
        served = answered.get("model") if isinstance(answered, Mapping) else None
        return Verdict("ignored", f"ignored, 200 (answered as {served!r})", excerpt(last.text))
    verdict = _d_refusal(last)
    naming = "naming the model" if _error(last).names_model else "not naming the model"
    return replace(verdict, text=f"{verdict.text}; {naming}")


# --- what moves an answer ----------------------------------------------------------------------------


def _readout(probe: Probe, exchange: Exchange, layout: str) -> stability_.Readout:
    """One answer of a stability probe, read as its surface says."""
    body = exchange.json()
    if probe.surface == systemone_route.SURFACE:
        asked = _asked(exchange, "questions")
        return stability_.systemone_readout(body, asked if isinstance(asked, Mapping) else {})
    if probe.surface == decisions_route.SURFACE:
        asked = _asked(exchange, "questions")
        return stability_.decisions_readout(body, asked if isinstance(asked, list) else [])
    return stability_.prompt_readout(_wire(probe, exchange), layout)


def _layouts(probe: Probe, count: int) -> list[str]:
    """The prompt layout each request of the plan was composed from."""
    if probe.stability == "option-order":
        return list(ROTATIONS)[:count]
    if probe.stability == "variant":
        assert probe.variant is not None
        return [probe.prompt, probe.variant, probe.prompt, probe.prompt, probe.variant][:count]
    return [probe.prompt] * count


#: A stability probe's cell when no answer came to compare, before the reason.
NOT_MEASURABLE = "not measurable"


@classifier
def stability(probe: Probe, exchanges: Sequence[Exchange]) -> Verdict:
    """A stability probe's answers against each other (its plan: stability.KINDS): the largest change
    of any option's probability and the flips, graded against the repeat noise in the same cassette."""
    refused = next((e for e in exchanges if e.status != 200), None)
    if refused is not None:
        unserved = None
        if probe.surface == systemone_route.SURFACE:
            unserved = _s1_unserved(refused)
        elif probe.surface == decisions_route.SURFACE:
            unserved = _d_unserved(refused)
        # Nothing to compare: no grade of stability, and the reason in its place (llama.cpp's Responses
        # route refuses the logprob fields, so nothing moves or stays there that could be seen).
        got = unserved or _refused(refused)
        return replace(got, text=f"{NOT_MEASURABLE}: {got.text}")
    kind = probe.stability or ""
    read = [
        _readout(probe, e, layout)
        for e, layout in zip(exchanges, _layouts(probe, len(exchanges)), strict=False)
    ]
    tolerance = probe.tolerance if probe.tolerance is not None else stability_.settings().tolerance
    compare = stability_.compare
    noise: stability_.Change | None = None
    if kind == "repeat":
        warm = read[1:]
        pairs = [compare(a, b) for i, a in enumerate(warm) for b in warm[i + 1 :]]
        change = stability_.worst(pairs)
        flips = sum(compare(warm[0], r).flips for r in warm[1:])
        change = stability_.Change(change.largest, flips, change.equal)
        shown = warm
    elif kind == "cache":
        change, noise, shown = compare(read[0], read[1]), compare(read[1], read[2]), read[:2]
    elif kind == "load":
        change, noise, shown = compare(read[2], read[3]), compare(read[1], read[2]), read[2:4]
    elif kind == "variant":
        change, noise, shown = compare(read[3], read[4]), compare(read[2], read[3]), read[3:5]
    else:  # option-order
        change, shown = stability_.worst([compare(read[0], r) for r in read[1:]]), read
    answers = len(shown)
    measured = stability_.measure(kind, change, noise, tolerance, answers)
    text = stability_.describe(measured)
    if kind == "option-order":
        text += " (the model on this server: a fact about the model, not a server defect)"
    graded: Grade | None = None
    if kind == "variant" and probe.surface in (systemone_route.SURFACE, decisions_route.SURFACE):
        # The API's semantics: renaming, adding or reordering questions leaves each answer as it was.
        graded = "fail" if measured.grade == "moves" else "pass"
    return Verdict(
        "info",
        text,
        excerpt([stability_.shown(r) for r in shown]),
        {"stability": measured.grade},
        grade=graded,
        stability=measured.to_json(),
    )


# --- which body a decision route speaks ---------------------------------------------------------------


@classifier
def dialect(probe: Probe, exchanges: Sequence[Exchange]) -> Verdict:
    """A route's dialect probe: the same questions in every body the route is documented to speak; the
    first answered in its own shape names the dialect, and what each other body got is the evidence."""
    found = dialects.found_in(probe.surface, exchanges)
    told = "; ".join(found.told)
    if found.dialect is None:
        last = next((e for e in exchanges if e.status != 200), exchanges[-1])
        unserved = _s1_unserved(last) if probe.surface == systemone_route.SURFACE else _d_unserved(last)
        if unserved is not None:
            return unserved
        return Verdict("refused", f"no documented body answered in its own shape ({told})", excerpt(told))
    return Verdict(
        "supported", f"speaks {found.dialect} body ({told})", excerpt(told), {"dialect": found.dialect}
    )


# --- which confidence a decision server means ---------------------------------------------------------


@classifier
def confidence_formula(probe: Probe, exchanges: Sequence[Exchange]) -> Verdict:
    """The answers' `confidence` against the five formulas servers use, computed from each answer's own
    probabilities: which one the server's figure matches, per question type (jevper/probe/confidence.py)."""
    last = exchanges[-1]
    unserved = _s1_unserved(last) if probe.surface == systemone_route.SURFACE else _d_unserved(last)
    if unserved is not None:
        return unserved
    if last.status != 200:
        return _refused(last)
    body = last.json()
    answers = body.get("answers") if isinstance(body, Mapping) else None
    listed = (
        list(answers.values())
        if isinstance(answers, Mapping)
        else answers
        if isinstance(answers, list)
        else []
    )
    found = confidence.matches([a for a in listed if isinstance(a, Mapping)])
    shown = [
        {k: a.get(k) for k in ("type", "confidence", "probabilities")}
        for a in listed
        if isinstance(a, Mapping)
    ]
    return Verdict(
        "info", f"confidence is {confidence.describe(found)}", excerpt(shown), {"confidence": found}
    )
