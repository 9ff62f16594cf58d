"""Usage under the documented names, and the documented error tree: a model's refusal, a cut-off answer
and a router's 200 carrying an upstream's error, through the real SDKs against a loopback server."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from jevper import (
    Choice,
    ClientCapabilityError,
    Example,
    IncompleteAnswerError,
    InvalidQuestionError,
    ModelRefusalError,
    ProviderError,
    SystemOneClient,
    UnsupportedMethodError,
    Usage,
    _wire,
)
from jevper.testing.faults import running

INTENT = Choice(criteria={"billing": "money", "technical": "errors"})
STATE = "I was charged twice."


def chat(
    content: str | None, *, finish: str = "stop", usage: dict[str, Any] | None = None, **message: Any
) -> dict[str, Any]:
    choice = {
        "index": 0,
        "finish_reason": finish,
        "message": {"role": "assistant", "content": content, **message},
        "logprobs": {
            "content": [
                {
                    "token": "A",
                    "logprob": -0.2,
                    "top_logprobs": [
                        {"token": "A", "logprob": -0.2},
                        {"token": "B", "logprob": -1.9},
                    ],
                }
            ]
        },
    }
    return {
        "object": "chat.completion",
        "model": "m",
        "choices": [choice],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 1},
    }


def client(loopback: Any, **options: Any) -> SystemOneClient:
    sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    return SystemOneClient(sdk, model="m", api=options.pop("api", "chat_completions"), **options)


def test_usage_names_the_counts_as_the_documented_api_does_and_sums_reasoning_tokens(loopback: Any) -> None:
    thought = {
        "prompt_tokens": 10,
        "completion_tokens": 7,
        "completion_tokens_details": {"reasoning_tokens": 6},
    }
    loopback.reply("/chat/completions", 200, chat("A", usage=thought))
    loopback.reply("/chat/completions", 200, chat("A", usage=thought))
    usage = (
        client(loopback, method="logprobs")
        .system_one(state=STATE, questions={"a": INTENT, "b": INTENT})
        .usage
    )
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens, usage.n_calls) == (20, 14, 12, 2)
    assert usage.cached_tokens is None  # no response said anything about its cache


def test_a_reasoning_count_one_response_left_out_is_none_and_a_reported_zero_stays_zero(
    loopback: Any,
) -> None:
    loopback.reply("/chat/completions", 200, chat("A"))
    none_said = client(loopback, method="logprobs").system_one(state=STATE, questions={"q": INTENT}).usage
    assert none_said.reasoning_tokens is None and none_said.input_tokens == 10
    zero = {"prompt_tokens": 0, "completion_tokens": 1, "completion_tokens_details": {"reasoning_tokens": 0}}
    loopback.reply("/chat/completions", 200, chat("A", usage=zero))
    said = client(loopback, method="logprobs").system_one(state=STATE, questions={"q": INTENT}).usage
    assert (said.input_tokens, said.reasoning_tokens) == (0, 0)


def test_the_responses_surface_reads_reasoning_tokens_from_output_tokens_details() -> None:
    body = {
        "status": "completed",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "A"}]}],
        "usage": {"input_tokens": 5, "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 8}},
    }
    assert _wire.read("responses", body).usage.reasoning_tokens == 8


def test_the_former_usage_names_still_read_with_a_deprecation_warning() -> None:
    usage = Usage(input_tokens=3, output_tokens=4, n_calls=2)
    with pytest.warns(DeprecationWarning, match="read Usage.input_tokens"):
        assert usage.prompt_tokens == 3
    with pytest.warns(DeprecationWarning, match="read Usage.output_tokens"):
        assert usage.completion_tokens == 4
    with pytest.warns(DeprecationWarning, match="read Usage.n_calls"):
        assert usage.requests == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (usage.input_tokens, usage.output_tokens, usage.n_calls) == (3, 4, 2)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (chat(None, finish="content_filter"), "finish 'content_filter'"),
        (chat(None, refusal="I can't help with that."), "I can't help with that."),
    ],
    ids=["content-filter", "refusal"],
)
def test_a_model_that_declines_is_a_model_refusal_error_and_is_not_asked_again(
    loopback: Any, body: dict[str, Any], said: str
) -> None:
    loopback.reply("/chat/completions", 200, body)
    with pytest.raises(ModelRefusalError, match="declined") as refused:
        client(loopback).system_one(state=STATE, questions={"q": INTENT})
    assert said in str(refused.value) and isinstance(refused.value, ProviderError)
    assert refused.value.status_code == 200
    # method="auto" would re-ask an unreadable answer once; a refusal is the model's answer.
    assert len(loopback.requests) == 1


def test_a_refusal_stop_reason_on_messages_is_a_model_refusal_error(loopback: Any) -> None:
    body = {
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": "refusal",
        "usage": {"input_tokens": 3, "output_tokens": 0},
    }
    loopback.reply("/messages", 200, body)
    sdk: Any = Anthropic(base_url=loopback.url.removesuffix("/v1"), api_key="local", max_retries=0)
    with pytest.raises(ModelRefusalError, match="finish 'refusal'"):
        SystemOneClient(sdk, model="m", api="messages").system_one(state=STATE, questions={"q": INTENT})
    assert len(loopback.requests) == 1


def test_an_answer_cut_off_by_its_budget_is_an_incomplete_answer_error_under_provider_error(
    loopback: Any,
) -> None:
    loopback.reply("/chat/completions", 200, chat("", finish="length"))
    with pytest.raises(ProviderError) as cut:
        client(loopback, method="structured").system_one(state=STATE, questions={"q": INTENT})
    assert isinstance(cut.value, IncompleteAnswerError) and cut.value.field == "max_tokens"


def test_a_200_carrying_an_upstream_error_has_the_upstream_status_code() -> None:
    with running() as server:
        sdk = OpenAI(base_url=server.base_url("embedded-error"), api_key="local", max_retries=0)
        with pytest.raises(ProviderError, match="upstream model crashed") as failed:
            SystemOneClient(sdk, model="m", api="chat_completions").system_one(
                state=STATE, questions={"q": INTENT}
            )
    assert (failed.value.status, failed.value.status_code) == (200, 500)


def test_a_method_the_surface_cannot_read_and_a_field_the_route_cannot_carry_are_typed() -> None:
    sdk: Any = Anthropic(base_url="http://127.0.0.1:9", api_key="local", max_retries=0)
    with pytest.raises(UnsupportedMethodError, match="carries logprobs"):
        SystemOneClient(sdk, model="m", api="messages", method="logprobs").system_one(
            state=STATE, questions={"q": INTENT}
        )
    with pytest.raises(ClientCapabilityError, match="drop examples=") as dropped:
        SystemOneClient(
            OpenAI(base_url="http://127.0.0.1:9/v1", api_key="local"),
            model="m",
            api="systemone",
            examples=[Example(state="s", answers={"q": "billing"})],
        )
    assert isinstance(dropped.value, InvalidQuestionError)


def test_a_refusal_part_on_responses_is_a_model_refusal_error_not_answer_text(loopback: Any) -> None:
    part = {"type": "refusal", "refusal": "I won't classify that."}
    body = {
        "object": "response",
        "status": "completed",
        "model": "m",
        "output": [{"type": "message", "role": "assistant", "content": [part]}],
        "usage": {"input_tokens": 5, "output_tokens": 3},
    }
    loopback.reply("/responses", 200, body)
    with pytest.raises(ModelRefusalError, match="I won't classify that"):
        client(loopback, api="responses").system_one(state=STATE, questions={"q": INTENT})
    assert len(loopback.requests) == 1
