"""Responses (OpenAI's and the OpenResponses specification's): build the request, read the response."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from jevper._wire import _read as r
from jevper._wire._tokens import read_entries
from jevper._wire.chat import split_inline_trace
from jevper._wire.errors import raise_embedded
from jevper._wire.request import WireRequest
from jevper._wire.result import TokenLogprob, WireResult, WireUsage
from jevper._wire.surface import PromptSurfaceRecord

SURFACE: Final = "responses"
LOGPROBS_INCLUDE = "message.output_text.logprobs"


def build(request: WireRequest) -> dict[str, Any]:
    """The JSON body for POST /v1/responses, in the portable form (typed items, string content)."""
    items = [{"type": "message", "role": "system", "content": request.system}]
    items += [{"type": "message", "role": t.role, "content": t.content} for t in request.turns]
    body: dict[str, Any] = {"model": request.model, "input": items}
    if request.logprobs:
        body["include"] = [LOGPROBS_INCLUDE]
        # SGLang only carries logprobs when top_logprobs is sent, so it always is.
        body["top_logprobs"] = request.top_logprobs
    if request.grammar is not None:
        body["grammar"] = request.grammar
    if request.schema is not None:
        body["text"] = {
            "format": {
                "type": "json_schema",
                "name": request.schema.name,
                "strict": True,
                "schema": request.schema.schema,
            }
        }
    if request.prompt_cache_key is not None:
        body["prompt_cache_key"] = request.prompt_cache_key
    reasoning = {"effort": request.reasoning_effort, "summary": request.reasoning_summary}
    if any(value is not None for value in reasoning.values()):
        body["reasoning"] = {name: value for name, value in reasoning.items() if value is not None}
    extra = dict(request.extra_body)
    # The Chat Completions spellings of two caller fields mean the same here under their own names;
    # ollama's Responses route, for one, ignores reasoning_effort and reads reasoning.effort.
    if "reasoning_effort" in extra and "reasoning" not in extra:
        extra["reasoning"] = {"effort": extra.pop("reasoning_effort")}
    if "max_tokens" in extra and "max_output_tokens" not in extra:
        extra["max_output_tokens"] = extra.pop("max_tokens")
    body.update(extra)
    for name in request.omit:
        body.pop(name, None)
    return body


def read(body: Mapping[str, Any], *, model: str | None = None) -> WireResult:
    """Normalize a Responses body; reasoning items are read whatever their parts are called."""
    r.mapping(SURFACE, "the body", body)
    raise_embedded(SURFACE, body, model=model)
    output = r.seq(SURFACE, "output", body.get("output"))
    texts: list[str] = []
    refusals: list[str] = []  # the model's words declining to answer
    traces: list[str] = []
    trace_field: str | None = None
    logprobs: list[TokenLogprob] | None = None
    types: list[str] = []
    messages = 0
    for i, item_value in enumerate(output):
        item = r.mapping(SURFACE, f"output[{i}]", item_value)
        kind = r.string(SURFACE, f"output[{i}].type", item.get("type"))
        if kind == "reasoning":
            for part_key in ("content", "summary"):
                parts = r.opt_seq(SURFACE, f"output[{i}].{part_key}", item.get(part_key)) or ()
                for j, part_value in enumerate(parts):
                    part = r.mapping(SURFACE, f"output[{i}].{part_key}[{j}]", part_value)
                    trace = r.encodable(
                        r.opt_str(SURFACE, f"output[{i}].{part_key}[{j}].text", part.get("text"))
                    )
                    if trace:
                        traces.append(trace)
                        trace_field = trace_field or str(part.get("type") or f"{part_key}_text")
            types.append("reasoning")
            continue
        if kind != "message":
            types.append(kind)
            continue
        messages += 1
        if messages > 1:
            continue  # the first message is the answer, as the first choice is on Chat Completions
        parts = r.seq(SURFACE, f"output[{i}].content", item.get("content"))
        for j, part_value in enumerate(parts):
            path = f"output[{i}].content[{j}]"
            part = r.mapping(SURFACE, path, part_value)
            part_type = r.string(SURFACE, f"{path}.type", part.get("type"))
            types.append(part_type)
            if part_type == "output_text":
                texts.append(r.string(SURFACE, f"{path}.text", part.get("text")))
                if "logprobs" in part and part["logprobs"] is not None:
                    entries = r.seq(SURFACE, f"{path}.logprobs", part["logprobs"])
                    logprobs = (logprobs or []) + list(read_entries(SURFACE, f"{path}.logprobs", entries))
            elif part_type == "refusal":
                refusals.append(r.string(SURFACE, f"{path}.refusal", part.get("refusal")))
    text: str | None = "".join(texts) if texts else None
    reasoning = "\n".join(traces) if traces else None
    if reasoning is None and text is not None:
        reasoning, text = split_inline_trace(text)
        trace_field = "inline" if reasoning is not None else None
    status = r.opt_str(SURFACE, "status", body.get("status"))
    details = r.opt_mapping(SURFACE, "incomplete_details", body.get("incomplete_details")) or {}
    reason = r.opt_str(SURFACE, "incomplete_details.reason", details.get("reason"))
    refusal = "".join(refusals) or ("content_filter" if reason == "content_filter" else None)
    return WireResult(
        surface=SURFACE,
        text=text,
        reasoning=reasoning,
        reasoning_field=trace_field,
        logprobs=tuple(logprobs) if logprobs is not None else None,
        finish=status,
        truncated_by="max_output_tokens"
        if status == "incomplete" and reason == "max_output_tokens"
        else None,
        choices=messages,
        content_types=tuple(types),
        usage=_usage(body),
        raw=body,
        refusal=refusal,
    )


def _usage(body: Mapping[str, Any]) -> WireUsage:
    usage = r.opt_mapping(SURFACE, "usage", body.get("usage")) or {}
    details = r.opt_mapping(SURFACE, "usage.input_tokens_details", usage.get("input_tokens_details")) or {}
    cached = r.opt_count(SURFACE, "usage.input_tokens_details.cached_tokens", details.get("cached_tokens"))
    output = r.opt_mapping(SURFACE, "usage.output_tokens_details", usage.get("output_tokens_details")) or {}
    thought = r.opt_count(
        SURFACE, "usage.output_tokens_details.reasoning_tokens", output.get("reasoning_tokens")
    )
    return WireUsage(
        prompt_tokens=r.opt_count(SURFACE, "usage.input_tokens", usage.get("input_tokens")),
        completion_tokens=r.opt_count(SURFACE, "usage.output_tokens", usage.get("output_tokens")),
        cached_tokens=cached,
        cached_tokens_path="usage.input_tokens_details.cached_tokens" if cached is not None else None,
        reasoning_tokens=thought,
    )


def conversation(
    turns: Sequence[tuple[str, str]], *, system_as_turn: bool = False, text_parts: bool = False
) -> dict[str, Any]:
    """The turns as ``input`` message items, with string content or (``text_parts``) input_text parts."""
    if text_parts:
        return {
            "input": [
                {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}
                for role, text in turns
            ]
        }
    return {"input": [{"type": "message", "role": role, "content": text} for role, text in turns]}


RECORD = PromptSurfaceRecord(
    name=SURFACE,
    title="Responses",
    route="responses",
    sdk="openai",
    sdk_resource=("responses",),
    keywords=frozenset({"model", "input"}),
    build=build,
    read=read,
    conversation=conversation,
    answer_list="output",
    logprobs=True,
    prefill=False,
)
