"""The probe harness's recordings (tests/fixtures/providers/, each folder with its provenance.json)
replayed through the client's readers and, where a whole exchange fits, through the client itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from jevper import Choice, ProviderError, ReasoningConfig, SystemOneClient, _wire
from jevper.probe.cassettes import load_exchanges

PROVIDERS = Path(__file__).parents[1] / "fixtures" / "providers"
VLLM = PROVIDERS / "vllm-0.32.0"
LLAMACPP = PROVIDERS / "llamacpp-b10434"
INTENT = Choice(
    criteria={
        "billing": "money, invoices, refunds, charges",
        "technical": "errors, crashes, login or performance problems",
        "sales": "pricing, plans, purchasing, upgrades",
    }
)


def exchange(folder: Path, name: str, index: int = 0) -> tuple[int, str]:
    recorded = load_exchanges(folder / f"{name}.yaml")[index]
    return recorded.status, recorded.text


def test_the_recordings_replayed_here_say_where_they_came_from() -> None:
    for folder in (VLLM, LLAMACPP):
        provenance = json.loads((folder / "provenance.json").read_text())
        assert provenance["how"] == "recorded live"
        assert provenance["recorded_on"] and provenance["release"]


@pytest.mark.parametrize(
    ("folder", "name", "kind", "field"),
    [
        (VLLM, "chat-bad-path", "missing_route", None),
        (VLLM, "chat-bad-model", "unknown_model", None),
        (VLLM, "responses-bad-model", "unknown_model", None),
        (VLLM, "chat-tops-without-logprobs", "logprobs_refused", "top_logprobs"),
        (VLLM, "chat-logprobs-21-tops", "field_refused", "top_logprobs"),
        (VLLM, "messages-thinking", "field_refused", "thinking"),
        (VLLM, "messages-output-config-bad-type", "field_refused", "output_config"),
        (VLLM, "messages-no-max-tokens", "field_refused", "max_tokens"),
        (VLLM, "chat-cache-salt", "field_refused", "cache_salt"),
        (LLAMACPP, "chat-bad-path", "missing_route", None),
        (LLAMACPP, "chat-stream-zero", "field_refused", "stream"),
        (LLAMACPP, "chat-n-two", "field_refused", "n"),
    ],
)
def test_recorded_refusals_are_classified_by_the_wording_table(
    folder: Path, name: str, kind: str, field: str | None
) -> None:
    status, body = exchange(folder, name)
    error = _wire.read_error(status, body, model="jevper-no-such-model")
    assert (error.kind, error.field) == (kind, field), error.message


def test_vllm_answers_n_two_with_two_choices_and_the_first_is_read() -> None:
    # Recorded under sampling (temperature 0.7), as the reference says: vLLM returns both choices.
    status, body = exchange(VLLM, "chat-n-two")
    result = _wire.read("chat_completions", json.loads(body))
    assert (status, result.choices) == (200, 2)
    assert result.text == json.loads(body)["choices"][0]["message"]["content"]


def test_vllm_names_the_model_in_its_404_and_the_route_404_does_not() -> None:
    status, body = exchange(VLLM, "chat-bad-model")
    assert _wire.read_error(status, body, model="jevper-no-such-model").names_model
    status, body = exchange(VLLM, "chat-bad-path")
    assert _wire.read_error(status, body, model="smollm2").shape == "detail"


def test_vllm_carries_real_logprobs_on_the_responses_output_text_part() -> None:
    status, body = exchange(VLLM, "responses-logprobs")
    result = _wire.read("responses", json.loads(body))
    assert status == 200 and result.logprobs
    assert result.logprobs[0].token == "A" and len(result.logprobs[0].top) == 5
    assert (result.finish, result.truncated_by) == ("incomplete", "max_output_tokens")


def test_vllm_reports_cached_tokens_when_served_with_prompt_tokens_details() -> None:
    _, body = exchange(VLLM, "chat-cache-warm", 1)
    usage = _wire.read("chat_completions", json.loads(body)).usage
    assert usage.cached_tokens_path == "usage.prompt_tokens_details.cached_tokens"
    assert usage.cached_tokens and usage.cached_tokens > 0


def test_vllm_answers_stream_zero_because_it_coerces_it_to_false() -> None:
    status, _ = exchange(VLLM, "chat-stream-zero")
    assert status == 200


def test_the_smollm2_template_on_llamacpp_takes_a_system_turn_after_a_user_turn() -> None:
    # The reference's Qwen template raises a 500 here; SmolLM2's renders it, so no refusal to pin.
    status, _ = exchange(LLAMACPP, "chat-system-after-user")
    assert status == 200


def test_a_vllm_thinking_refusal_on_messages_drops_the_field_and_re_asks(loopback: Any) -> None:
    refusal = exchange(VLLM, "messages-thinking")
    loopback.reply("/messages", *refusal)
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": '{"billing": 0.6, "technical": 0.3, "sales": 0.1}'}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 9, "output_tokens": 9},
    }
    loopback.reply("/messages", 200, answer)
    sdk = Anthropic(base_url=loopback.url.removesuffix("/v1"), api_key="local", max_retries=0)
    asked = SystemOneClient(
        sdk, model="smollm2", api="messages", reasoning=ReasoningConfig(budget_tokens=512)
    )
    response = asked.system_one(state="I was charged twice.", questions={"q": INTENT})
    first, second = loopback.bodies("/messages")
    assert "thinking" in first and "thinking" not in second
    assert "reasoning_config is not configured" in response.debug["server_limits"]["thinking"]


def test_a_vllm_unknown_model_on_responses_is_reported_as_it_stands(loopback: Any) -> None:
    loopback.reply("/responses", *exchange(VLLM, "responses-bad-model"))
    asked = SystemOneClient(
        OpenAI(base_url=loopback.url, api_key="local", max_retries=0), model="jevper-no-such-model"
    )
    with pytest.raises(ProviderError, match="does not exist") as caught:
        asked.system_one(state="I was charged twice.", questions={"q": INTENT})
    assert caught.value.kind == "unknown_model"
    assert [e.path for e in loopback.requests] == ["/responses"]


def test_a_vllm_responses_label_readout_is_read_at_the_first_token(loopback: Any) -> None:
    loopback.reply("/responses", *exchange(VLLM, "responses-logprobs"))
    asked = SystemOneClient(
        OpenAI(base_url=loopback.url, api_key="local", max_retries=0), model="smollm2", method="logprobs"
    )
    answer: Any = asked.system_one(state="I was charged twice.", questions={"q": INTENT}).answers["q"]
    assert answer.surface == "responses"
    assert list(answer.probabilities) == list(INTENT.options)
    assert answer.probabilities["billing"] > answer.probabilities["technical"] > answer.probabilities["sales"]
