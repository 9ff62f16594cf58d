"""Server quirks that change nothing in what jevper sends, pinned so they keep changing nothing: the real
openai SDK against a loopback server replaying bodies transcribed from the reference (each fixture in
tests/fixtures/client/wire/transcribed.json states its provenance)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import OpenAI

from jevper import Choice, MalformedAnswerError, Noul, ProviderError, SystemOneClient

INTENT = Choice(criteria={"billing": "money", "technical": "errors", "sales": "pricing"})
STATE = "I was charged twice."


def jevper(loopback: Any, **settings: Any) -> SystemOneClient:
    return SystemOneClient(
        OpenAI(base_url=loopback.url, api_key="local", max_retries=0), model="m", **settings
    )


def test_lm_studio_ignoring_text_format_on_responses_is_a_malformed_answer_naming_the_keys(
    loopback: Any, fixtures: Any
) -> None:
    case = fixtures.transcribed("lmstudio_responses_text_format_ignored")
    assert case["provenance"]["source"] == "transcribed"
    loopback.reply("/responses", case["status"], case["body"])
    loopback.reply("/responses", case["status"], case["body"])
    asked = jevper(loopback, api="responses", method="structured")
    with pytest.raises(MalformedAnswerError) as caught:
        asked.system_one(state=STATE, questions={"q": INTENT})
    message = str(caught.value)
    assert "missing ['billing', 'sales', 'technical'], extra ['intent']" in message
    assert "after one corrective retry" in message
    first, retry = loopback.bodies("/responses")
    assert first["text"]["format"]["strict"] is True  # the field was sent, and accepted
    assert retry["input"][-2] == {"type": "message", "role": "assistant", "content": '{"intent": "A"}'}
    assert "not a valid answer" in retry["input"][-1]["content"]


def test_output_is_bounded_with_max_tokens_and_jevper_never_sends_max_completion_tokens(
    loopback: Any,
) -> None:
    # ollama ignores max_completion_tokens and reads max_tokens; the caller's bound travels as given.
    loopback.reply("/chat/completions", 200, {"choices": [{"message": {"content": '{"choice": "sales"}'}}]})
    loopback.reply("/chat/completions", 200, {"choices": [{"message": {"content": '{"choice": "sales"}'}}]})
    asked = jevper(loopback, api="chat_completions", method="discrete")
    asked.system_one(state=STATE, questions={"q": INTENT})
    asked.system_one(state=STATE, questions={"q": INTENT}, extra_body={"max_tokens": 16})
    default, bounded = loopback.bodies("/chat/completions")
    assert "max_tokens" not in default and "max_completion_tokens" not in default
    assert bounded["max_tokens"] == 16 and "max_completion_tokens" not in bounded


def test_ollama_ignoring_strict_is_caught_by_the_clients_own_validation(loopback: Any, fixtures: Any) -> None:
    case = fixtures.transcribed("ollama_chat_noul_out_of_range")
    assert case["provenance"]["server"] == "ollama"
    loopback.reply("/chat/completions", case["status"], case["body"])
    loopback.reply("/chat/completions", case["status"], case["body"])
    asked = jevper(loopback, api="chat_completions", method="structured")
    with pytest.raises(MalformedAnswerError, match=r"'noul' must be in \[0, 1.0\], got 521304.0"):
        asked.system_one(state=STATE, questions={"n": Noul("Urgent?")})
    sent = loopback.bodies("/chat/completions")[0]["response_format"]["json_schema"]
    assert sent["strict"] is True and sent["schema"]["properties"]["noul"]["maximum"] == 1


def test_a_schema_violating_choice_answer_is_caught_when_strict_is_ignored(loopback: Any) -> None:
    # The shape ollama's 200 takes (transcribed fixture above), with keys the schema forbids.
    wrong = json.dumps({"choices": [{"message": {"content": '{"billing": 0.9, "refunds": 0.1}'}}]})
    loopback.reply("/chat/completions", 200, wrong)
    loopback.reply("/chat/completions", 200, wrong)
    with pytest.raises(MalformedAnswerError, match=r"missing \['sales', 'technical'\], extra \['refunds'\]"):
        jevper(loopback, api="chat_completions", method="structured").system_one(
            state=STATE, questions={"q": INTENT}
        )


def test_vllms_400_for_an_output_budget_over_the_context_is_reported_with_its_numbers(
    loopback: Any, fixtures: Any
) -> None:
    case = fixtures.transcribed("vllm_max_tokens_over_context")
    loopback.reply("/chat/completions", case["status"], case["body"])
    with pytest.raises(ProviderError) as caught:
        jevper(loopback, api="chat_completions", method="logprobs").system_one(
            state=STATE, questions={"q": INTENT}
        )
    error = caught.value
    assert (error.status, error.field) == (400, "max_tokens")
    assert "max_tokens=2048 cannot be greater than max_model_len=max_total_tokens=1024" in str(error)
    assert "extra_body={'max_tokens': n}" in str(error)
    assert len(loopback.requests) == 1  # a refusal is not retried
