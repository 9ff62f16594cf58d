"""What the blocking and the async client share: settings, validation, and the response assembly."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jevper._engine import Outcome, Settings
from jevper._errors import InvalidQuestionError
from jevper._memory import Memory
from jevper._prompt import StateTurns, checked_cache_key, state_turns
from jevper._usage import total
from jevper.models import APIS, METHODS, Api, Example, Method, ReasoningConfig, State, SystemOneResponse
from jevper.questions import Question, as_question

DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class Core:
    """What both clients hold: the caller's client, the validated settings, and what was learnt."""

    client: object
    settings: Settings
    memory: Memory
    timeout: float
    max_concurrency: int


def core(
    client: object,
    *,
    model: str,
    method: str,
    api: str,
    extra_body: Mapping[str, Any] | None,
    top_logprobs: int,
    max_concurrency: int,
    normalize_probabilities: bool,
    examples: Sequence[Example] | None,
    prompt_cache_key: str | None,
    timeout: float,
    reasoning: ReasoningConfig | None,
    prefill: bool = True,
) -> Core:
    if not isinstance(model, str) or not model:
        raise InvalidQuestionError(f"model: expected the server's model id, got {model!r}")
    settings = Settings(
        model=model,
        method=checked_method(method),
        api=checked_api(api),
        extra_body=checked_extra_body(extra_body),
        top_logprobs=checked_positive("top_logprobs", top_logprobs, minimum=2),
        normalize=bool(normalize_probabilities),
        examples=checked_examples(examples),
        prompt_cache_key=checked_cache_key(prompt_cache_key),
        reasoning=reasoning,
        prefill=bool(prefill),
    )
    return Core(
        client,
        settings,
        Memory(),
        checked_timeout(timeout),
        checked_positive("max_concurrency", max_concurrency),
    )


@dataclass(frozen=True)
class Plan:
    settings: Settings
    state: StateTurns
    questions: tuple[tuple[str, Question], ...]


def checked_extra_body(extra_body: Mapping[str, Any] | None) -> dict[str, Any]:
    if extra_body is None:
        return {}
    if not isinstance(extra_body, Mapping):
        raise InvalidQuestionError(
            f"extra_body: expected a mapping of request fields, got {type(extra_body).__name__}"
        )
    if extra_body.get("stream"):
        raise InvalidQuestionError(
            f"extra_body: expected stream to be absent or false, got {extra_body['stream']!r}; "
            "jevper reads one whole response — omit the field"
        )
    return dict(extra_body)


def checked_method(method: str) -> Method:
    for known in METHODS:
        if method == known:
            return known
    raise InvalidQuestionError(f"method: expected one of {list(METHODS)}, got {method!r}")


def checked_api(api: str) -> Api:
    for known in APIS:
        if api == known:
            return known
    raise InvalidQuestionError(f"api: expected one of {list(APIS)}, got {api!r}")


def checked_positive(name: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidQuestionError(f"{name}: expected an integer of at least {minimum}, got {value!r}")
    return value


def checked_timeout(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidQuestionError(
            f"timeout: expected a positive number of seconds, got {value!r}; every request is bounded"
        )
    return float(value)


def checked_examples(examples: Sequence[Example] | None) -> tuple[Example, ...]:
    if examples is None:
        return ()
    checked = []
    for i, example in enumerate(examples):
        if isinstance(example, Mapping):
            example = Example(state=example.get("state", ""), answers=example.get("answers", {}))
        if not isinstance(example, Example):
            raise InvalidQuestionError(
                f"examples[{i}]: expected an Example or a mapping, got {example!r:.80}"
            )
        checked.append(example)
    return tuple(checked)


def plan(
    base: Settings,
    *,
    state: State,
    questions: Mapping[str, object],
    examples: Sequence[Example] | None,
    method: str | None,
    api: str | None,
    extra_body: Mapping[str, Any] | None,
    normalize_probabilities: bool | None,
    prompt_cache_key: str | None,
    reasoning: ReasoningConfig | None,
    prefill: bool | None = None,
) -> Plan:
    if not isinstance(questions, Mapping) or not questions:
        raise InvalidQuestionError(
            f"questions: expected a non-empty mapping of question id to question, got {questions!r:.80}"
        )
    settings = Settings(
        model=base.model,
        method=checked_method(method) if method is not None else base.method,
        api=checked_api(api) if api is not None else base.api,
        extra_body={**base.extra_body, **checked_extra_body(extra_body)},
        top_logprobs=base.top_logprobs,
        normalize=base.normalize if normalize_probabilities is None else bool(normalize_probabilities),
        examples=checked_examples(examples) if examples is not None else base.examples,
        prompt_cache_key=checked_cache_key(prompt_cache_key) or base.prompt_cache_key,
        reasoning=reasoning if reasoning is not None else base.reasoning,
        prefill=base.prefill if prefill is None else bool(prefill),
    )
    asked = tuple((str(qid), as_question(str(qid), q)) for qid, q in questions.items())
    return Plan(settings, state_turns(state), asked)


def assemble(plan: Plan, outcomes: Sequence[Outcome], memory: Memory) -> SystemOneResponse:
    model = plan.settings.model
    answers = {qid: outcome.answer for (qid, _), outcome in zip(plan.questions, outcomes, strict=True)}
    reasoning = {qid: a.reasoning for qid, a in answers.items() if a.reasoning is not None}
    limits: dict[str, str] = {}
    for outcome in outcomes:
        limits.update(memory.server_limits(model, outcome.surface))
    route = memory.routes.get(model)
    debug: dict[str, Any] = {
        "questions": {
            qid: {
                "method": outcome.method,
                "surface": outcome.surface,
                "requests": outcome.trail.requests,
                "why": list(outcome.trail.why),
                "prefill": _prefill_debug(outcome),
            }
            for (qid, _), outcome in zip(plan.questions, outcomes, strict=True)
        },
        "server_limits": limits,
    }
    if plan.settings.api == "auto":
        debug["route"] = {"surface": memory.route(model), "why": route.why if route else "preferred surface"}
    usage = total(r for outcome in outcomes for r in outcome.trail.results)
    return SystemOneResponse(answers=answers, usage=usage, reasoning=reasoning, debug=debug)


def _prefill_debug(outcome: Outcome) -> dict[str, Any] | None:
    """What opening was sent on the Messages surface, and how each reply treated it."""
    if outcome.trail.prefill is None:
        return None
    return {"sent": outcome.trail.prefill, "replies": list(outcome.trail.prefill_replies)}
