"""The wire readers against real bodies (recorded from the embedded llama.cpp) and transcribed ones."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from jevper import _wire
from jevper._errors import InvalidQuestionError, JevperError, MalformedAnswerError, ProviderError
from jevper._wire import SchemaFormat, Turn, WireRequest

WIRE = Path(__file__).parents[1] / "fixtures" / "client" / "wire"
TRANSCRIBED: dict[str, dict[str, Any]] = json.loads((WIRE / "transcribed.json").read_text())


def recorded(name: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((WIRE / f"llamacpp_{name}.json").read_text())
    assert record["provenance"]["source"] == "recorded"
    return record


def body_of(record: dict[str, Any]) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(record["body"])
    return parsed


def test_a_recorded_chat_completion_yields_the_answer_token_and_twenty_alternatives() -> None:
    result = _wire.read("chat_completions", body_of(recorded("chat_logprobs")))
    assert result.surface == "chat_completions"
    assert result.logprobs is not None and len(result.logprobs) >= 1
    first = result.logprobs[0]
    assert len(first.top) == 20
    assert all(lp <= 0.0 for _, lp in first.top)
    assert result.text is not None and result.text.startswith(first.token)
    assert result.usage.prompt_tokens is not None and result.usage.completion_tokens is not None


def test_llamacpp_reports_cached_tokens_under_prompt_tokens_details() -> None:
    result = _wire.read("chat_completions", body_of(recorded("chat_plain_length")))
    assert result.usage.cached_tokens_path == "usage.prompt_tokens_details.cached_tokens"
    assert isinstance(result.usage.cached_tokens, int)


def test_a_length_finish_on_chat_completions_names_max_tokens() -> None:
    result = _wire.read("chat_completions", body_of(recorded("chat_plain_length")))
    assert result.finish == "length"
    assert result.truncated_by == "max_tokens"


def test_llamacpp_honours_the_grammar_and_lists_unconstrained_alternatives() -> None:
    result = _wire.read("chat_completions", body_of(recorded("chat_grammar")))
    assert result.text in {"A", "B"}
    assert result.finish == "stop"
    assert result.logprobs is not None and result.logprobs[0].token == result.text


def test_the_llamacpp_responses_route_refuses_top_logprobs_and_the_table_says_so() -> None:
    record = recorded("responses_logprobs_refused")
    error = _wire.read_error(record["status"], record["body"], model="smollm2")
    assert (error.status, error.shape, error.kind) == (400, "object", "logprobs_refused")
    assert error.message == "top_logprobs requires logprobs to be set to true"


def test_the_llamacpp_responses_route_answers_an_include_alone_with_an_empty_logprob_list() -> None:
    result = _wire.read("responses", body_of(recorded("responses_include_only")))
    assert result.logprobs == ()
    assert result.usage.cached_tokens_path == "usage.input_tokens_details.cached_tokens"


def test_a_recorded_messages_body_reads_text_stop_reason_and_cache_reads() -> None:
    result = _wire.read("messages", body_of(recorded("messages_plain")))
    assert result.text
    assert result.logprobs is None
    assert result.finish == "max_tokens" and result.truncated_by == "max_tokens"
    assert result.usage.cached_tokens_path == "usage.cache_read_input_tokens"


def test_llamacpp_route_404_is_a_missing_route() -> None:
    record = recorded("unknown_path")
    error = _wire.read_error(record["status"], record["body"], model="smollm2")
    assert (error.kind, error.shape, error.names_model) == ("missing_route", "object", False)


@pytest.mark.parametrize(("name", "field"), [("chat_stream_zero", "stream"), ("chat_n_two", "n")])
def test_llamacpp_field_refusals_name_the_field(name: str, field: str) -> None:
    record = recorded(name)
    error = _wire.read_error(record["status"], record["body"])
    assert (error.kind, error.field, error.server) == ("field_refused", field, "llama.cpp")


@pytest.mark.parametrize(
    ("name", "shape", "kind", "field"),
    [
        ("ollama_route_404_text", "text", "missing_route", None),
        ("vllm_route_404_detail", "detail", "missing_route", None),
        ("sglang_route_404_detail", "detail", "missing_route", None),
        ("sglang_developer_role_bare_string", "string", "role_refused", None),
        ("lmstudio_unknown_path_200", "object", "embedded", None),
        ("ollama_stream_zero", "object", "field_refused", "stream"),
        ("lmstudio_stream_zero", "object", "field_refused", None),
        ("vllm_system_after_user", "object", "system_position", None),
        ("llamacpp_qwen_system_after_user_500", "object", "system_position", None),
        ("ollama_unknown_model", "object", "unknown_model", None),
        ("vllm_unknown_model", "object", "unknown_model", None),
        ("vllm_output_config_type", "object", "field_refused", "output_config"),
        ("vllm_max_tokens_over_context", "object", "field_refused", "max_tokens"),
        ("llamacpp_n_two", "object", "field_refused", "n"),
    ],
)
def test_each_servers_error_wording_is_classified_from_the_table(
    name: str, shape: str, kind: str, field: str | None
) -> None:
    case = TRANSCRIBED[name]
    assert case["provenance"]["source"] == "transcribed"
    error = _wire.read_error(case["status"], case["body"], model=case.get("model", "smollm2"))
    assert (error.shape, error.kind, error.field) == (shape, kind, field)
    assert error.message and error.message in case["body"].replace('\\"', '"')


def test_a_404_that_quotes_the_model_names_it() -> None:
    case = TRANSCRIBED["ollama_unknown_model"]
    assert _wire.read_error(404, case["body"], model="qwen9:9b").names_model
    assert not _wire.read_error(404, '{"detail": "Not Found"}', model="qwen9:9b").names_model


def test_an_unclassified_404_is_a_missing_route_unless_it_names_the_model() -> None:
    assert _wire.read_error(404, "nothing here", model="m1").kind == "missing_route"
    assert _wire.read_error(404, "no such thing as m1", model="m1").kind == "unknown_model"


def test_an_empty_error_body_has_the_empty_shape() -> None:
    error = _wire.read_error(502, b"")
    assert (error.shape, error.message, error.kind) == ("empty", "", "other")


def test_a_200_carrying_an_error_raises_provider_error_with_the_servers_words() -> None:
    case = TRANSCRIBED["lmstudio_unknown_path_200"]
    with pytest.raises(ProviderError) as caught:
        _wire.read("chat_completions", json.loads(case["body"]))
    assert caught.value.status == 200
    assert caught.value.server_message == "Unexpected endpoint or method. (POST /v1/nope)"
    assert caught.value.kind == "embedded"


def test_ollama_puts_its_trace_in_reasoning() -> None:
    result = _wire.read("chat_completions", json.loads(TRANSCRIBED["ollama_chat_reasoning_field"]["body"]))
    assert (result.reasoning_field, result.text) == ("reasoning", "A")
    assert result.usage.cached_tokens == 0


def test_sglang_puts_its_trace_in_reasoning_content() -> None:
    result = _wire.read(
        "chat_completions", json.loads(TRANSCRIBED["sglang_chat_reasoning_content_im_end"]["body"])
    )
    assert result.reasoning_field == "reasoning_content"
    assert result.usage.cached_tokens is None and result.usage.cached_tokens_path is None


def test_an_inline_think_block_is_split_off_the_answer() -> None:
    body = {"choices": [{"message": {"content": "<think>money</think>\nA"}, "finish_reason": "stop"}]}
    result = _wire.read("chat_completions", body)
    assert (result.reasoning, result.reasoning_field, result.text) == ("money", "inline", "A")


def test_a_vllm_incomplete_response_names_max_output_tokens() -> None:
    result = _wire.read("responses", json.loads(TRANSCRIBED["vllm_responses_incomplete"]["body"]))
    assert result.truncated_by == "max_output_tokens"
    assert (result.text, result.reasoning_field) == (None, "reasoning_text")


def test_ollamas_responses_route_carries_an_empty_logprob_list() -> None:
    result = _wire.read("responses", json.loads(TRANSCRIBED["ollama_responses_empty_logprobs"]["body"]))
    assert result.logprobs == ()
    assert result.usage.cached_tokens == 64


def test_a_thinking_block_without_text_reads_as_no_text() -> None:
    result = _wire.read("messages", json.loads(TRANSCRIBED["vllm_messages_thinking_only"]["body"]))
    assert (result.text, result.reasoning, result.finish) == (None, "Hmm", "end_turn")
    assert result.content_types == ("thinking",)


def test_a_reported_zero_cache_read_is_kept_as_zero() -> None:
    result = _wire.read("messages", json.loads(TRANSCRIBED["lmstudio_messages_cache_zero"]["body"]))
    assert result.usage.cached_tokens == 0


def _chat(content: object = "A", **choice: object) -> dict[str, Any]:
    return {"choices": [{"message": {"content": content}, **choice}]}


def _lp(token: object = "A", logprob: object = -0.1, top: object = None) -> dict[str, Any]:
    return {"logprobs": {"content": [{"token": token, "logprob": logprob, "top_logprobs": top or []}]}}


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, "choices to be a list"),
        ({"choices": []}, "choices to be a non-empty list"),
        ({"choices": ["x"]}, "choices[0] to be an object"),
        (_chat(5), "choices[0].message.content to be a string or null"),
        (_chat(**_lp(logprob="x")), "logprob to be a number"),
        (_chat(**_lp(logprob=0.5)), "a logprob <= 0"),
        (_chat(**_lp(logprob=float("nan"))), "a finite logprob"),
        (_chat(**_lp(logprob=-math.inf)), "a finite logprob"),
        (_chat(**_lp(token=3)), "token to be a string"),
        (_chat(**_lp(top=[{"token": "A", "logprob": -1}, {"token": "A", "logprob": -2}])), "'A' twice"),
        ({**_chat(), "usage": {"prompt_tokens": "9"}}, "usage.prompt_tokens to be a non-negative integer"),
        ({**_chat(), "usage": {"prompt_tokens": True}}, "a non-negative integer"),
    ],
)
def test_a_malformed_chat_body_raises_malformed_answer_error_naming_expected_and_arrived(
    body: dict[str, Any], words: str
) -> None:
    with pytest.raises(MalformedAnswerError, match=words.replace("[", r"\[").replace("]", r"\]")) as caught:
        _wire.read("chat_completions", body)
    assert "got" in str(caught.value)


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (float("nan"), "a finite logprob"),
        (-math.inf, "a finite logprob"),
        (math.inf, "a finite logprob"),
        (0.5, "a logprob <= 0"),
        ("x", "logprob to be a number"),
    ],
)
def test_one_bad_alternative_among_twenty_well_formed_ones_is_named(bad: object, words: str) -> None:
    top = [{"token": f"t{i}", "logprob": -1.0 - i} for i in range(20)]
    top[13]["logprob"] = bad
    with pytest.raises(MalformedAnswerError, match=words) as caught:
        _wire.read("chat_completions", _chat(**_lp(top=top)))
    assert "top_logprobs[13]" in str(caught.value)


def test_alternatives_whose_logprobs_sum_past_the_floats_range_are_still_read() -> None:
    top = [{"token": f"t{i}", "logprob": -1e308} for i in range(3)]
    result = _wire.read("chat_completions", _chat(**_lp(top=top)))
    assert result.logprobs is not None and [lp for _, lp in result.logprobs[0].top] == [-1e308] * 3


def test_distinct_byte_tokens_rendering_alike_are_not_duplicates() -> None:
    top = [{"token": "", "bytes": [226], "logprob": -1.0}, {"token": "", "bytes": [227], "logprob": -2.0}]
    result = _wire.read("chat_completions", _chat(**_lp(top=top)))
    assert result.logprobs is not None and len(result.logprobs[0].top) == 2


@pytest.mark.parametrize(
    ("surface", "body"),
    [
        ("responses", {"output": "x"}),
        ("responses", {"output": [{"type": "message", "content": [{"type": "output_text", "text": 3}]}]}),
        ("responses", {"output": [{"content": []}]}),
        ("messages", {"content": [{"type": "text"}]}),
        ("messages", {"content": None}),
        ("messages", {"content": [], "usage": {"input_tokens": -1}}),
        ("chat_completions", []),
    ],
)
def test_malformed_bodies_of_every_surface_raise_a_jevper_error(surface: _wire.Surface, body: Any) -> None:
    with pytest.raises(MalformedAnswerError):
        _wire.read(surface, body)


def test_every_error_is_a_jevper_error() -> None:
    for error in (InvalidQuestionError, MalformedAnswerError, ProviderError):
        assert issubclass(error, JevperError)


REQUEST = WireRequest(
    model="m",
    system="S",
    turns=(Turn("user", "Q"),),
    logprobs=True,
    grammar='root ::= "A"',
    schema=SchemaFormat("answer", {"type": "object", "properties": {"p": {"type": "number", "minimum": 0}}}),
    prompt_cache_key="k",
    extra_body={"reasoning_effort": "none", "max_tokens": 9},
)


def test_the_responses_body_uses_typed_items_with_string_content_and_always_sends_top_logprobs() -> None:
    body = _wire.build("responses", REQUEST)
    assert body["input"][0] == {"type": "message", "role": "system", "content": "S"}
    assert body["include"] == ["message.output_text.logprobs"] and body["top_logprobs"] == 20
    assert body["text"]["format"]["strict"] is True
    assert body["reasoning"] == {"effort": "none"} and "reasoning_effort" not in body
    assert body["max_output_tokens"] == 9 and "max_tokens" not in body
    assert body["prompt_cache_key"] == "k"


def test_the_messages_body_folds_numeric_bounds_into_descriptions_and_lets_the_caller_max_tokens_win() -> (
    None
):
    body = _wire.build("messages", REQUEST)
    schema = body["output_config"]["format"]["schema"]
    assert schema["properties"]["p"] == {"type": "number", "description": "(minimum 0)"}
    assert body["system"] == "S" and body["max_tokens"] == 9
    assert "top_logprobs" not in body and "prompt_cache_key" not in body


def test_the_messages_body_adds_the_thinking_budget_to_the_default_max_tokens() -> None:
    body = _wire.build("messages", WireRequest(model="m", system="S", turns=(), thinking_budget=1024))
    assert body["max_tokens"] == 2048
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}


def test_a_caller_max_tokens_that_cannot_hold_the_thinking_budget_is_refused_locally() -> None:
    request = WireRequest(
        model="m", system="S", turns=(), thinking_budget=1024, extra_body={"max_tokens": 1024}
    )
    with pytest.raises(InvalidQuestionError, match="max_tokens above the thinking budget"):
        _wire.build("messages", request)


def test_a_reasoning_item_is_read_whatever_its_parts_are_called() -> None:
    body = {
        "status": "completed",
        "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "short"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "A"}]},
        ],
    }
    result = _wire.read("responses", body)
    assert (result.reasoning, result.reasoning_field, result.text) == ("short", "summary_text", "A")


def test_a_trace_that_cannot_be_encoded_as_utf8_is_dropped() -> None:
    body = json.loads('{"choices": [{"message": {"content": "A", "reasoning_content": "bad \\ud800"}}]}')
    result = _wire.read("chat_completions", body)
    assert (result.text, result.reasoning) == ("A", None)


def test_distinct_tokens_with_the_same_empty_text_are_told_apart_by_id() -> None:
    top = [{"id": 2, "token": "", "logprob": -1.0}, {"id": 0, "token": "", "logprob": -2.0}]
    result = _wire.read("chat_completions", _chat(**_lp(top=top)))
    assert result.logprobs is not None and len(result.logprobs[0].top) == 2
    with pytest.raises(MalformedAnswerError, match="twice"):
        _wire.read("chat_completions", _chat(**_lp(top=[top[0], top[0]])))


def test_llamacpps_responses_route_accepts_text_format_and_ignores_it() -> None:
    record = recorded("responses_text_format")
    assert record["status"] == 200
    assert record["request"]["body"]["text"]["format"]["strict"] is True
    text = _wire.read("responses", body_of(record)).text or ""
    with pytest.raises(ValueError):
        json.loads(text)  # prose: the schema was not enforced


def test_system_ones_own_error_object_is_read_for_its_message() -> None:
    body = '{"detail": {"error_type": "authentication_error", "message": "expected a key, got none"}}'
    error = _wire.read_error(401, body)
    assert (error.shape, error.message) == ("detail", "expected a key, got none")
    # An object without a message is kept whole, as before.
    assert '"error_type"' in _wire.read_error(400, '{"detail": {"error_type": "x"}}').message
