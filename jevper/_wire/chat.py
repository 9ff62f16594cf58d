"""Chat Completions: build the request body, read the response body."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from jevper._wire import _read as r
from jevper._wire._tokens import read_entries
from jevper._wire.errors import raise_embedded
from jevper._wire.request import WireRequest
from jevper._wire.result import WireResult, WireUsage
from jevper._wire.surface import PromptSurfaceRecord

SURFACE: Final = "chat_completions"
#: Where a trace can be, in the order servers use them (ollama/vLLM, llama.cpp/SGLang, others).
TRACE_FIELDS = ("reasoning", "reasoning_content", "thinking")
_TRACE_PATHS = tuple((name, f"choices[0].message.{name}") for name in TRACE_FIELDS)


def build(request: WireRequest) -> dict[str, Any]:
    """The JSON body for POST /v1/chat/completions."""
    messages: list[dict[str, str]] = [{"role": "system", "content": request.system}]
    messages += [{"role": t.role, "content": t.content} for t in request.turns]
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = request.top_logprobs
    if request.grammar is not None:
        body["grammar"] = request.grammar
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": request.schema.name, "strict": True, "schema": request.schema.schema},
        }
    if request.prompt_cache_key is not None:
        body["prompt_cache_key"] = request.prompt_cache_key
    if request.reasoning_effort is not None:
        body["reasoning_effort"] = request.reasoning_effort
    body.update(request.extra_body)
    for name in request.omit:
        body.pop(name, None)
    return body


def read(body: Mapping[str, Any], *, model: str | None = None) -> WireResult:
    """Normalize a Chat Completions response body."""
    r.mapping(SURFACE, "the body", body)
    raise_embedded(SURFACE, body, model=model)
    choices = r.seq(SURFACE, "choices", body.get("choices"))
    if not choices:
        raise r.malformed(SURFACE, "choices", "a non-empty list", choices)
    choice = r.mapping(SURFACE, "choices[0]", choices[0])
    message = r.mapping(SURFACE, "choices[0].message", choice.get("message"))
    text = r.opt_str(SURFACE, "choices[0].message.content", message.get("content"))
    reasoning, field = None, None
    for name, path in _TRACE_PATHS:
        trace = r.encodable(r.opt_str(SURFACE, path, message.get(name)))
        if trace:
            reasoning, field = trace, name
            break
    if reasoning is None and text is not None:
        reasoning, text = split_inline_trace(text)
        field = "inline" if reasoning is not None else None
    logprobs = None
    carrier = r.opt_mapping(SURFACE, "choices[0].logprobs", choice.get("logprobs"))
    if carrier is not None:
        entries = r.opt_seq(SURFACE, "choices[0].logprobs.content", carrier.get("content"))
        if entries is not None:
            logprobs = read_entries(SURFACE, "choices[0].logprobs.content", entries)
    finish = r.opt_str(SURFACE, "choices[0].finish_reason", choice.get("finish_reason"))
    refusal = r.opt_str(SURFACE, "choices[0].message.refusal", message.get("refusal")) or None
    if refusal is None and finish == "content_filter":
        refusal = finish
    return WireResult(
        surface=SURFACE,
        text=text,
        reasoning=reasoning,
        reasoning_field=field,
        logprobs=logprobs,
        finish=finish,
        truncated_by="max_tokens" if finish == "length" else None,
        choices=len(choices),
        content_types=("text",) if text is not None else (),
        usage=_usage(body),
        raw=body,
        refusal=refusal,
    )


def split_inline_trace(text: str) -> tuple[str | None, str]:
    """A ``<think>…</think>`` block at the start of the answer is a trace, not the answer."""
    stripped = text.lstrip()
    if not stripped.startswith("<think>"):
        return None, text
    end = stripped.find("</think>")
    if end < 0:
        return stripped[len("<think>") :].strip(), ""
    return stripped[len("<think>") : end].strip(), stripped[end + len("</think>") :].lstrip()


def _usage(body: Mapping[str, Any]) -> WireUsage:
    usage = r.opt_mapping(SURFACE, "usage", body.get("usage")) or {}
    details = r.opt_mapping(SURFACE, "usage.prompt_tokens_details", usage.get("prompt_tokens_details")) or {}
    cached = r.opt_count(SURFACE, "usage.prompt_tokens_details.cached_tokens", details.get("cached_tokens"))
    path = "usage.prompt_tokens_details.cached_tokens" if cached is not None else None
    if cached is None:
        timings = r.opt_mapping(SURFACE, "timings", body.get("timings")) or {}
        cached = r.opt_count(SURFACE, "timings.cache_n", timings.get("cache_n"))
        path = "timings.cache_n" if cached is not None else None
    return WireUsage(
        prompt_tokens=r.opt_count(SURFACE, "usage.prompt_tokens", usage.get("prompt_tokens")),
        completion_tokens=r.opt_count(SURFACE, "usage.completion_tokens", usage.get("completion_tokens")),
        cached_tokens=cached,
        cached_tokens_path=path,
        reasoning_tokens=_reasoning_tokens(usage),
    )


def _reasoning_tokens(usage: Mapping[str, Any]) -> int | None:
    at = "usage.completion_tokens_details"
    details = r.opt_mapping(SURFACE, at, usage.get("completion_tokens_details")) or {}
    return r.opt_count(SURFACE, f"{at}.reasoning_tokens", details.get("reasoning_tokens"))


def conversation(
    turns: Sequence[tuple[str, str]], *, system_as_turn: bool = False, text_parts: bool = False
) -> dict[str, Any]:
    """The turns as ``messages``, a system turn among them."""
    return {"messages": [{"role": role, "content": text} for role, text in turns]}


RECORD = PromptSurfaceRecord(
    name=SURFACE,
    title="Chat Completions",
    route="chat/completions",
    sdk="openai",
    sdk_resource=("chat", "completions"),
    keywords=frozenset({"model", "messages"}),
    build=build,
    read=read,
    conversation=conversation,
    answer_list="choices",
    logprobs=True,
    prefill=False,
)
