"""Anthropic Messages: build the request body, read the response body."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from jevper._errors import InvalidQuestionError
from jevper._wire import _read as r
from jevper._wire.errors import raise_embedded
from jevper._wire.request import WireRequest
from jevper._wire.result import WireResult, WireUsage
from jevper._wire.surface import PromptSurfaceRecord

SURFACE: Final = "messages"
#: The API has no default output budget and vLLM and SGLang require one, so one is always sent.
DEFAULT_MAX_TOKENS = 1024
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def build(request: WireRequest) -> dict[str, Any]:
    """The JSON body for POST /v1/messages."""
    budget = request.thinking_budget
    turns = [{"role": t.role, "content": t.content} for t in request.turns]
    if request.prefill is not None:
        # The model continues this assistant turn, so the answer starts as JSON even where
        # output_config is ignored (llama.cpp, LM Studio).
        turns.append({"role": "assistant", "content": request.prefill})
    body: dict[str, Any] = {
        "model": request.model,
        "system": request.system,
        "messages": turns,
        # The thinking budget must stay strictly below max_tokens, so it is added on top.
        "max_tokens": (request.max_tokens or DEFAULT_MAX_TOKENS) + (budget or 0),
    }
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if budget is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if request.schema is not None:
        body["output_config"] = {
            "format": {"type": "json_schema", "schema": fold_bounds(request.schema.schema)}
        }
    extra = dict(request.extra_body)
    caller_max = extra.get("max_tokens")
    if budget is not None and isinstance(caller_max, int) and caller_max <= budget:
        raise InvalidQuestionError(
            f"messages: expected extra_body max_tokens above the thinking budget ({budget}), got "
            f"{caller_max}; the API requires budget_tokens < max_tokens — raise max_tokens or lower "
            "ReasoningConfig(budget_tokens=...)"
        )
    body.update(extra)
    for name in request.omit:
        body.pop(name, None)
    return body


PrefillReply = Literal["echoed", "continued", "fresh"]


def with_prefill(text: str, prefill: str) -> tuple[str, PrefillReply]:
    """The whole answer, and how the server treated the prefill.

    llama.cpp repeats the prefill before its continuation ("echoed"); Anthropic's API returns only the
    continuation ("continued"), which gets the prefill put in front. vLLM closes the prefill turn and
    answers in a new one, so a reply opening an object of its own is read as it stands ("fresh").
    """
    stripped = text.lstrip()
    if stripped.startswith(prefill):
        return stripped, "echoed"
    if stripped.startswith("{"):
        return stripped, "fresh"
    return prefill + text, "continued"


def fold_bounds(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema with each numeric bound moved into its field's description (the API refuses bounds)."""
    folded: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _BOUNDS:
            continue
        if isinstance(value, Mapping):
            value = (
                fold_bounds(value)
                if key not in ("properties", "$defs")
                else {
                    name: fold_bounds(sub) if isinstance(sub, Mapping) else sub for name, sub in value.items()
                }
            )
        elif isinstance(value, list):
            value = [fold_bounds(v) if isinstance(v, Mapping) else v for v in value]
        folded[key] = value
    bounds = [f"{key} {schema[key]}" for key in _BOUNDS if key in schema]
    if bounds:
        described = str(schema.get("description", "")).strip()
        folded["description"] = f"{described} ({', '.join(bounds)})".strip()
    return folded


def read(body: Mapping[str, Any], *, model: str | None = None) -> WireResult:
    """Normalize a Messages body: text blocks are the answer, thinking blocks the trace."""
    r.mapping(SURFACE, "the body", body)
    raise_embedded(SURFACE, body, model=model)
    blocks = r.seq(SURFACE, "content", body.get("content"))
    texts: list[str] = []
    traces: list[str] = []
    types: list[str] = []
    for i, block_value in enumerate(blocks):
        block = r.mapping(SURFACE, f"content[{i}]", block_value)
        kind = r.string(SURFACE, f"content[{i}].type", block.get("type"))
        types.append(kind)
        if kind == "text":
            texts.append(r.string(SURFACE, f"content[{i}].text", block.get("text")))
        elif kind == "thinking":
            trace = r.encodable(r.opt_str(SURFACE, f"content[{i}].thinking", block.get("thinking")))
            if trace:
                traces.append(trace)
    stop = r.opt_str(SURFACE, "stop_reason", body.get("stop_reason"))
    # Anthropic's API says "stop_sequence" here, llama.cpp "end_turn"; both name the sequence below.
    sequence = r.opt_str(SURFACE, "stop_sequence", body.get("stop_sequence"))
    return WireResult(
        surface=SURFACE,
        text="".join(texts) if texts else None,
        reasoning="\n".join(traces) if traces else None,
        reasoning_field="thinking" if traces else None,
        logprobs=None,  # the API has no field for them
        finish=stop,
        truncated_by="max_tokens" if stop == "max_tokens" else None,
        choices=1,
        content_types=tuple(types),
        usage=_usage(body),
        raw=body,
        stop_sequence=sequence,
        refusal=stop if stop == "refusal" else None,
    )


def _usage(body: Mapping[str, Any]) -> WireUsage:
    usage = r.opt_mapping(SURFACE, "usage", body.get("usage")) or {}
    cached = r.opt_count(SURFACE, "usage.cache_read_input_tokens", usage.get("cache_read_input_tokens"))
    return WireUsage(
        prompt_tokens=r.opt_count(SURFACE, "usage.input_tokens", usage.get("input_tokens")),
        completion_tokens=r.opt_count(SURFACE, "usage.output_tokens", usage.get("output_tokens")),
        cached_tokens=cached,
        cached_tokens_path="usage.cache_read_input_tokens" if cached is not None else None,
    )


def conversation(
    turns: Sequence[tuple[str, str]], *, system_as_turn: bool = False, text_parts: bool = False
) -> dict[str, Any]:
    """A leading system turn as ``system`` (unless ``system_as_turn``), the other turns as ``messages``."""
    fields: dict[str, Any] = {}
    if turns and turns[0][0] == "system" and not system_as_turn:
        fields["system"] = turns[0][1]
        turns = turns[1:]
    fields["messages"] = [{"role": role, "content": text} for role, text in turns]
    return fields


RECORD = PromptSurfaceRecord(
    name=SURFACE,
    title="Messages",
    route="messages",
    sdk="anthropic",
    sdk_resource=("messages",),
    keywords=frozenset({"model", "messages", "max_tokens", "system"}),
    build=build,
    read=read,
    conversation=conversation,
    answer_list="content",
    logprobs=False,  # the API has no field for them
    prefill=True,
    # A server that ignores or refuses structured output or thinking (llama.cpp, vLLM) still answers.
    droppable=frozenset({"output_config", "thinking"}),
    # Anthropic's input_tokens counts only what was not read from the cache.
    prompt_tokens_exclude_cached=True,
)
