"""Responses, Messages and api="auto" through the real openai and anthropic SDKs against a loopback
server, replaying bodies recorded from the embedded llama.cpp or transcribed from the reference."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from anthropic import Anthropic, AsyncAnthropic
from openai import OpenAI

from jevper import (
    AsyncSystemOneClient,
    Choice,
    ClientCapabilityError,
    IncompleteAnswerError,
    InvalidQuestionError,
    MalformedAnswerError,
    ProviderError,
    ReasoningConfig,
    SystemOneClient,
    SystemOneResponse,
)

INTENT = Choice(criteria={"billing": "money", "technical": "errors", "sales": "pricing"})
STATE = "I was charged twice."
JSON_ANSWER = '{"billing": 0.7, "technical": 0.2, "sales": 0.1}'


def chat_label(token: str = "A") -> dict[str, Any]:
    top = [{"token": t, "logprob": lp} for t, lp in (("A", -0.3), ("B", -1.5), ("C", -2.5))]
    return {
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": token},
                "logprobs": {"content": [{"token": token, "logprob": -0.3, "top_logprobs": top}]},
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1},
    }


def responses_body(text: str, logprobs: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "smollm2",
        "output": [
            {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [part]}
        ],
        "usage": {"input_tokens": 9, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 4}},
        **extra,
    }


def messages_body(text: str | None, stop: str = "end_turn", **usage: int) -> dict[str, Any]:
    content = [{"type": "text", "text": text}] if text is not None else []
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "smollm2",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 9, "output_tokens": 5, **usage},
    }


def answers(response: SystemOneResponse) -> dict[str, Any]:
    """The answers, typed loosely: each test knows which kind of question it asked."""
    return dict(response.answers)


def openai_client(loopback: Any, **settings: Any) -> SystemOneClient:
    return SystemOneClient(
        OpenAI(base_url=loopback.url, api_key="local", max_retries=0), model="smollm2", **settings
    )


def anthropic_client(loopback: Any, **settings: Any) -> SystemOneClient:
    sdk = Anthropic(base_url=loopback.url.removesuffix("/v1"), api_key="local", max_retries=0)
    return SystemOneClient(sdk, model="smollm2", api="messages", **settings)


# --- Responses -------------------------------------------------------------------------------------


def test_responses_reads_the_label_distribution_from_the_output_text_part(loopback: Any) -> None:
    entry = {
        "token": "B",
        "logprob": -0.2,
        "top_logprobs": [{"token": "B", "logprob": -0.2}, {"token": "A", "logprob": -1.8}],
    }
    loopback.reply("/responses", 200, responses_body("B", [entry]))
    response = openai_client(loopback, api="responses", method="logprobs").system_one(
        state=STATE, questions={"q": INTENT}
    )
    assert answers(response)["q"].choice == "technical"
    assert response.usage.cached_tokens == 4
    sent = loopback.bodies("/responses")[0]
    assert all(item["type"] == "message" and isinstance(item["content"], str) for item in sent["input"])
    assert sent["include"] == ["message.output_text.logprobs"] and sent["top_logprobs"] == 20
    assert sent["prompt_cache_key"].startswith("jevper-")


def test_responses_sends_a_strict_text_format_for_structured(loopback: Any) -> None:
    loopback.reply("/responses", 200, responses_body(JSON_ANSWER))
    openai_client(loopback, api="responses", method="structured").system_one(
        state=STATE, questions={"q": INTENT}
    )
    fmt = loopback.bodies("/responses")[0]["text"]["format"]
    assert (fmt["type"], fmt["strict"]) == ("json_schema", True)


def test_responses_incomplete_names_max_output_tokens(loopback: Any, fixtures: Any) -> None:
    loopback.reply("/responses", 200, fixtures.transcribed("vllm_responses_incomplete")["body"])
    with pytest.raises(IncompleteAnswerError, match="raise max_output_tokens") as caught:
        openai_client(loopback, api="responses", method="structured").system_one(
            state=STATE, questions={"q": INTENT}
        )
    assert caught.value.field == "max_output_tokens"


def test_responses_carries_ollamas_reasoning_effort_as_reasoning_effort_object(loopback: Any) -> None:
    loopback.reply("/responses", 200, responses_body(JSON_ANSWER))
    openai_client(
        loopback, api="responses", method="structured", extra_body={"reasoning_effort": "none"}
    ).system_one(state=STATE, questions={"q": INTENT})
    sent = loopback.bodies("/responses")[0]
    assert sent["reasoning"] == {"effort": "none"} and "reasoning_effort" not in sent


def test_reasoning_summary_travels_on_responses_and_a_two_step_mode_is_refused(loopback: Any) -> None:
    for _ in range(2):
        loopback.reply("/responses", 200, responses_body(JSON_ANSWER))
    reasoning = ReasoningConfig(effort="low", summary="concise", context="current_turn", mode="native")
    openai_client(loopback, api="responses", method="structured", reasoning=reasoning).system_one(
        state=STATE, questions={"q": INTENT}
    )
    openai_client(
        loopback, api="responses", method="structured", reasoning=ReasoningConfig(summary="auto")
    ).system_one(state=STATE, questions={"q": INTENT})
    first, second = loopback.bodies("/responses")
    assert first["reasoning"] == {"effort": "low", "summary": "concise"}
    assert second["reasoning"] == {"summary": "auto"}
    with pytest.raises(ClientCapabilityError, match="two_step"):
        ReasoningConfig(mode="two_step")
    with pytest.raises(InvalidQuestionError, match="expected summary to be one of"):
        ReasoningConfig(summary="brief")  # type: ignore[arg-type]


# --- api="auto" ------------------------------------------------------------------------------------


def test_auto_moves_the_readout_when_llamacpp_refuses_the_logprob_fields_and_remembers(
    loopback: Any, fixtures: Any
) -> None:
    refusal = fixtures.recorded("responses_logprobs_refused")
    loopback.reply("/responses", refusal["status"], refusal["body"])
    loopback.reply("/chat/completions", 200, chat_label("A"))
    loopback.reply("/chat/completions", 200, chat_label("B"))
    asked = openai_client(loopback)
    first = asked.system_one(state=STATE, questions={"q": INTENT})
    second = asked.system_one(state=STATE, questions={"q": INTENT})
    assert [e.path for e in loopback.requests] == ["/responses", "/chat/completions", "/chat/completions"]
    assert answers(first)["q"].surface == answers(second)["q"].surface == "chat_completions"
    assert "top_logprobs requires logprobs to be set to true" in first.debug["route"]["why"]


def test_auto_moves_the_readout_off_ollamas_empty_logprob_list(loopback: Any, fixtures: Any) -> None:
    loopback.reply("/responses", 200, fixtures.transcribed("ollama_responses_empty_logprobs")["body"])
    loopback.reply("/chat/completions", 200, chat_label("A"))
    response = openai_client(loopback).system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].surface == "chat_completions"
    assert "an empty logprob list" in response.debug["route"]["why"]


@pytest.mark.parametrize(
    "name", ["ollama_route_404_text", "vllm_route_404_detail", "sglang_route_404_detail"]
)
def test_auto_treats_a_404_that_does_not_name_the_model_as_a_missing_route(
    loopback: Any, fixtures: Any, name: str
) -> None:
    case = fixtures.transcribed(name)
    loopback.reply("/responses", case["status"], case["body"])
    loopback.reply("/chat/completions", 200, chat_label("A"))
    response = openai_client(loopback).system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].surface == "chat_completions"
    assert "the route is missing" in response.debug["route"]["why"]


def test_auto_treats_llamacpps_recorded_file_not_found_as_a_missing_route(
    loopback: Any, fixtures: Any
) -> None:
    record = fixtures.recorded("unknown_path")
    loopback.reply("/responses", record["status"], record["body"])
    loopback.reply("/chat/completions", 200, chat_label("A"))
    assert openai_client(loopback).system_one(state=STATE, questions={"q": INTENT}).answers["q"].surface == (
        "chat_completions"
    )


@pytest.mark.parametrize(
    ("name", "model"), [("ollama_unknown_model", "qwen9:9b"), ("vllm_unknown_model", "qwen9")]
)
def test_a_404_naming_the_model_is_reported_as_it_stands(
    loopback: Any, fixtures: Any, name: str, model: str
) -> None:
    case = fixtures.transcribed(name)
    loopback.reply("/responses", case["status"], case["body"])
    asked = SystemOneClient(OpenAI(base_url=loopback.url, api_key="local", max_retries=0), model=model)
    with pytest.raises(ProviderError) as caught:
        asked.system_one(state=STATE, questions={"q": INTENT})
    assert (caught.value.status, caught.value.kind) == (404, "unknown_model")
    assert model in caught.value.server_message
    assert [e.path for e in loopback.requests] == ["/responses"]


def test_a_200_carrying_an_error_is_a_provider_error(loopback: Any, fixtures: Any) -> None:
    case = fixtures.transcribed("lmstudio_unknown_path_200")
    loopback.reply("/responses", 200, case["body"])
    with pytest.raises(ProviderError, match="Unexpected endpoint or method") as caught:
        openai_client(loopback).system_one(state=STATE, questions={"q": INTENT})
    assert caught.value.status == 200


def test_chat_completions_skips_discovery(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat_label("A"))
    openai_client(loopback, api="chat_completions").system_one(state=STATE, questions={"q": INTENT})
    assert [e.path for e in loopback.requests] == ["/chat/completions"]


def test_a_bare_json_string_400_is_reported_in_the_servers_words(loopback: Any, fixtures: Any) -> None:
    case = fixtures.transcribed("sglang_developer_role_bare_string")
    loopback.reply("/chat/completions", case["status"], case["body"])
    with pytest.raises(ProviderError) as caught:
        openai_client(loopback, api="chat_completions").system_one(state=STATE, questions={"q": INTENT})
    assert (caught.value.server_message, caught.value.kind) == ("Unexpected message role.", "role_refused")


def test_a_system_turn_after_a_user_turn_is_never_sent_late(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat_label("A"))
    state = [
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": "Premium."},
        {"role": "user", "content": "Twice."},
    ]
    openai_client(loopback, api="chat_completions", method="logprobs").system_one(
        state=state, questions={"q": INTENT}
    )
    roles = [m["role"] for m in loopback.bodies()[0]["messages"]]
    assert roles.count("system") == 1 and roles[0] == "system"


# --- Messages --------------------------------------------------------------------------------------


def test_messages_resolves_auto_to_structured_without_a_probe(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER, cache_read_input_tokens=0))
    state = [{"role": "system", "content": "Premium."}, {"role": "user", "content": "Twice."}]
    response = anthropic_client(loopback).system_one(state=state, questions={"q": INTENT})
    answer: Any = response.answers["q"]
    assert (answer.method, answer.surface, answer.choice) == ("structured", "messages", "billing")
    assert response.usage.cached_tokens == 0 and response.usage.n_calls == 1
    sent = loopback.bodies("/messages")[0]
    # The prefilled reply holds the answer's object only: 32 tokens plus half the characters of its
    # widest spelling, {"billing": 0.123456789, ...} indented, instead of the 1024 sent otherwise.
    assert sent["max_tokens"] == 70 and sent["stop_sequences"] == ["}\n"]
    assert sent["system"].endswith("Premium.")
    assert all(m["role"] != "system" for m in sent["messages"])
    properties = sent["output_config"]["format"]["schema"]["properties"]
    assert properties["billing"] == {"type": "number", "description": "money (minimum 0, maximum 1)"}
    assert "JSON" in sent["messages"][0]["content"]  # the schema stays in the prompt as well


def test_messages_without_a_prefill_asks_a_budget_of_1024_tokens(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    anthropic_client(loopback, prefill=False).system_one(state=STATE, questions={"q": INTENT})
    sent = loopback.bodies("/messages")[0]
    assert sent["max_tokens"] == 1024 and "stop_sequences" not in sent


def test_messages_adds_the_thinking_budget_to_max_tokens_and_a_callers_max_tokens_wins(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    asked = anthropic_client(loopback, reasoning=ReasoningConfig(budget_tokens=1024))
    asked.system_one(state=STATE, questions={"q": INTENT})
    asked.system_one(state=STATE, questions={"q": INTENT}, extra_body={"max_tokens": 4096})
    first, second = loopback.bodies("/messages")
    assert (first["max_tokens"], first["thinking"]) == (2048, {"type": "enabled", "budget_tokens": 1024})
    assert second["max_tokens"] == 4096


def test_messages_refuses_a_callers_max_tokens_that_cannot_hold_the_budget_locally(loopback: Any) -> None:
    asked = anthropic_client(
        loopback, reasoning=ReasoningConfig(budget_tokens=2048), extra_body={"max_tokens": 1024}
    )
    with pytest.raises(InvalidQuestionError, match="above the thinking budget"):
        asked.system_one(state=STATE, questions={"q": INTENT})
    assert loopback.requests == []


def extra_field_refusal(field: str) -> dict[str, Any]:
    """A Messages server's 400 for a field it does not know, in pydantic's words."""
    message = f"body.{field}: Extra inputs are not permitted"
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


@pytest.mark.parametrize("field", ["output_config", "thinking"])
def test_a_400_on_a_messages_field_drops_it_re_asks_once_and_remembers(loopback: Any, field: str) -> None:
    loopback.reply("/messages", 400, extra_field_refusal(field))
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    asked = anthropic_client(loopback, reasoning=ReasoningConfig(budget_tokens=1024))
    first = asked.system_one(state=STATE, questions={"q": INTENT})
    asked.system_one(state=STATE, questions={"q": INTENT})
    sent = loopback.bodies("/messages")
    assert field in sent[0] and field not in sent[1] and field not in sent[2]
    assert "Extra inputs are not permitted" in first.debug["server_limits"][field]


@pytest.mark.parametrize("field", ["output_config", "thinking"])
def test_the_corrective_retry_after_a_dropped_field_leaves_the_field_out(loopback: Any, field: str) -> None:
    loopback.reply("/messages", 400, extra_field_refusal(field))
    loopback.reply("/messages", 200, messages_body("The billing team, I think."))
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    asked = anthropic_client(loopback, method="structured", reasoning=ReasoningConfig(budget_tokens=1024))
    response = asked.system_one(state=STATE, questions={"q": INTENT})
    # Three requests: the refused one, the one without the field, and the corrective retry without it.
    sent = loopback.bodies("/messages")
    assert [field in body for body in sent] == [True, False, False]
    why = response.debug["questions"]["q"]["why"]
    assert sum(line.startswith(f"dropped {field}") for line in why) == 1, why
    assert response.debug["questions"]["q"]["requests"] == 3


#: SGLang 0.5.9 refuses `thinking` on /v1/messages with a 400 because its request model has no such field
#: (shared/seed/local-servers.md, "The Messages route"); the reference does not quote the body, so this is
#: pydantic's refusal of an unknown field in the loc-list form, the words such a request model uses.
SGLANG_NO_THINKING = {
    "object": "error",
    "message": "[{'type': 'extra_forbidden', 'loc': ('body', 'thinking'), 'msg': 'Extra inputs are not "
    "permitted', 'input': {'type': 'enabled', 'budget_tokens': 1024}}]",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}


def test_sglangs_refusal_of_the_thinking_field_drops_it_and_re_asks(loopback: Any) -> None:
    loopback.reply("/messages", 400, SGLANG_NO_THINKING)
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    asked = anthropic_client(loopback, method="structured", reasoning=ReasoningConfig(budget_tokens=1024))
    response = asked.system_one(state=STATE, questions={"q": INTENT})
    assert ["thinking" in body for body in loopback.bodies("/messages")] == [True, False]
    assert "extra_forbidden" in response.debug["server_limits"]["thinking"]


@pytest.mark.parametrize(
    "words",
    [
        # Not a refusal of the field: its value, or the budget against another limit (composed wordings).
        "thinking.budget_tokens: Input should be greater than or equal to 1024",
        "max_tokens must be greater than thinking.budget_tokens",
        "The model is still thinking about another request; try again",
    ],
)
def test_a_400_that_only_mentions_thinking_is_reported_and_the_budget_is_kept(
    loopback: Any, words: str
) -> None:
    loopback.reply(
        "/messages", 400, {"type": "error", "error": {"type": "invalid_request_error", "message": words}}
    )
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    asked = anthropic_client(loopback, method="structured", reasoning=ReasoningConfig(budget_tokens=1024))
    with pytest.raises(ProviderError, match="answered 400") as caught:
        asked.system_one(state=STATE, questions={"q": INTENT})
    assert caught.value.field is None
    # Nothing was dropped or remembered: the next call still carries the caller's reasoning budget.
    response = asked.system_one(state=STATE, questions={"q": INTENT})
    assert ["thinking" in body for body in loopback.bodies("/messages")] == [True, True]
    assert response.debug["server_limits"] == {}


def test_vllms_vendor_400_on_output_config_format_type_is_classified_as_that_field(
    loopback: Any, fixtures: Any
) -> None:
    case = fixtures.transcribed("vllm_output_config_type")
    loopback.reply("/messages", case["status"], case["body"])
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    response = anthropic_client(loopback).system_one(state=STATE, questions={"q": INTENT})
    assert "output_config" in response.debug["server_limits"]


def test_a_thinking_block_without_text_is_an_error_naming_the_stop_reason(
    loopback: Any, fixtures: Any
) -> None:
    loopback.reply("/messages", 200, fixtures.transcribed("vllm_messages_thinking_only")["body"])
    with pytest.raises(MalformedAnswerError, match="got thinking and no text \\(stop reason 'end_turn'\\)"):
        anthropic_client(loopback).system_one(state=STATE, questions={"q": INTENT})


def test_a_messages_answer_cut_by_max_tokens_names_max_tokens(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body('{"billing": 0.', stop="max_tokens"))
    with pytest.raises(IncompleteAnswerError) as caught:
        anthropic_client(loopback, method="structured").system_one(state=STATE, questions={"q": INTENT})
    assert caught.value.field == "max_tokens"
    assert len(loopback.bodies("/messages")) == 1


def test_a_label_method_on_messages_is_refused_naming_structured(loopback: Any) -> None:
    with pytest.raises(InvalidQuestionError, match="use method='structured'"):
        anthropic_client(loopback, method="logprobs").system_one(state=STATE, questions={"q": INTENT})


def test_a_recorded_llamacpp_messages_body_is_read_through_the_anthropic_sdk(
    loopback: Any, fixtures: Any
) -> None:
    record = fixtures.recorded("messages_output_config")
    loopback.reply("/messages", record["status"], record["body"])
    loopback.reply("/messages", record["status"], record["body"])
    # llama.cpp accepts output_config and ignores it, so a weak model's prose is what comes back; an
    # explicit method="structured" does not fall back to discrete.
    with pytest.raises(MalformedAnswerError, match="after one corrective retry"):
        anthropic_client(loopback, method="structured").system_one(state=STATE, questions={"q": INTENT})
    assert len(loopback.bodies("/messages")) == 2
    assert json.loads(record["body"])["usage"]["cache_read_input_tokens"] >= 0


# --- Messages: method="auto" falls back from structured to discrete ------------------------------------

SCHEMA_COPY = '{"billing":{"type": "number", "minimum": 0, "maximum": 1, "description": "money"}, "techn'


def test_auto_on_messages_asks_for_one_option_when_the_structured_answer_runs_past_the_budget(
    loopback: Any,
) -> None:
    # What SmolLM2 does on llama.cpp, which ignores output_config: it copies the schema until max_tokens.
    loopback.reply("/messages", 200, messages_body(SCHEMA_COPY, stop="max_tokens"))
    loopback.reply("/messages", 200, messages_body('{"choice": "billing"}'))
    response = anthropic_client(loopback).system_one(state=STATE, questions={"q": INTENT})
    answer = answers(response)["q"]
    assert answer.method == "discrete"
    assert answer.probabilities == {"billing": 1.0, "technical": 0.0, "sales": 0.0}
    first, second = loopback.bodies("/messages")
    assert first["messages"][-1]["content"] == '{"billing":'
    assert "output_config" in first and "output_config" in second
    assert second["messages"][-1]["content"] == '{"choice": "'
    assert second["output_config"]["format"]["schema"]["properties"]["choice"]["enum"] == list(INTENT.options)
    debug = response.debug["questions"]["q"]
    assert debug["method"] == "discrete" and debug["requests"] == 2
    assert any(
        "ran past the output budget" in why and "answered with discrete" in why for why in debug["why"]
    )


def test_auto_on_messages_falls_back_after_the_structured_corrective_retry_and_remembers_it(
    loopback: Any,
) -> None:
    loopback.reply("/messages", 200, messages_body('{"billing": null, "technical": null, "sales": null}'))
    loopback.reply("/messages", 200, messages_body('{"billing": null, "technical": null, "sales": null}'))
    loopback.reply("/messages", 200, messages_body('{"choice": "sales"}'))
    loopback.reply("/messages", 200, messages_body('{"choice": "technical"}'))
    asked = anthropic_client(loopback)
    first = asked.system_one(state=STATE, questions={"q": INTENT})
    assert answers(first)["q"].choice == "sales"
    assert first.debug["questions"]["q"]["requests"] == 3
    # The next question goes straight to discrete on this model and surface, and says why.
    second = asked.system_one(state=STATE, questions={"q": INTENT})
    assert answers(second)["q"].choice == "technical"
    assert second.debug["questions"]["q"]["requests"] == 1
    assert any(
        why.startswith("remembered: structured JSON unreadable")
        for why in second.debug["questions"]["q"]["why"]
    )
    assert [b["messages"][-1]["content"] for b in loopback.bodies("/messages")] == [
        '{"billing":',
        '{"billing":',
        '{"choice": "',
        '{"choice": "',
    ]


def test_auto_on_messages_reports_the_discrete_error_when_the_fallback_fails_too(loopback: Any) -> None:
    for _ in range(4):
        loopback.reply("/messages", 200, messages_body("I cannot answer that."))
    with pytest.raises(MalformedAnswerError, match="after one corrective retry") as caught:
        anthropic_client(loopback).system_one(state=STATE, questions={"q": INTENT})
    assert "'choice'" in str(caught.value) or "JSON object" in str(caught.value)
    assert len(loopback.bodies("/messages")) == 4


def test_an_answer_cut_off_while_thinking_does_not_fall_back(loopback: Any) -> None:
    # The budget went to the trace, not to answer text: a discrete question would spend it the same way.
    body = messages_body(None, stop="max_tokens")
    body["content"] = [{"type": "thinking", "thinking": "Let me weigh the options...", "signature": ""}]
    loopback.reply("/messages", 200, body)
    with pytest.raises(IncompleteAnswerError):
        anthropic_client(loopback, reasoning=ReasoningConfig(budget_tokens=1024)).system_one(
            state=STATE, questions={"q": INTENT}
        )
    assert len(loopback.bodies("/messages")) == 1


# --- Messages: the answer's opening as a prefill ------------------------------------------------------

DISCRETE_PREFILL = '{"choice": "'


def test_messages_sends_the_answers_opening_and_reads_llamacpps_echo_of_it_once(
    loopback: Any, fixtures: Any
) -> None:
    record = fixtures.recorded("messages_prefill")  # llama.cpp b10434 repeats the prefill in its text
    loopback.reply("/messages", record["status"], record["body"])
    response = anthropic_client(loopback, method="discrete").system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].choice == "billing"
    assert response.debug["questions"]["q"]["prefill"] == {"sent": DISCRETE_PREFILL, "replies": ["echoed"]}
    sent = loopback.bodies("/messages")[0]
    assert sent["messages"][-1] == {"role": "assistant", "content": DISCRETE_PREFILL}
    assert record["request"]["body"]["messages"][-1]["content"] == DISCRETE_PREFILL


def test_messages_prepends_the_opening_to_a_continuation_that_does_not_repeat_it(
    loopback: Any, fixtures: Any
) -> None:
    # Anthropic's API returns only the continuation: the recorded answer without its echoed opening.
    body = json.loads(fixtures.recorded("messages_prefill")["body"])
    text = body["content"][0]["text"]
    assert text.startswith(DISCRETE_PREFILL)
    body["content"][0]["text"] = text.removeprefix(DISCRETE_PREFILL)
    loopback.reply("/messages", 200, body)
    response = anthropic_client(loopback, method="discrete").system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].choice == "billing"
    assert response.debug["questions"]["q"]["prefill"] == {"sent": DISCRETE_PREFILL, "replies": ["continued"]}


def test_a_server_answering_in_a_new_turn_after_the_prefill_is_read_as_it_stands(loopback: Any) -> None:
    # vLLM 0.32.0 closes the prefill turn and answers in a new one (measured: a bare prefill got a prose
    # answer); where output_config holds it, that answer is a whole object in the model's own spacing.
    loopback.reply("/messages", 200, messages_body('{ "choice": "sales" }'))
    response = anthropic_client(loopback, method="discrete").system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].choice == "sales"
    assert response.debug["questions"]["q"]["prefill"]["replies"] == ["fresh"]


def test_a_structured_prefill_opens_the_first_options_key_and_never_ends_in_whitespace(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body(' 0.7, "technical": 0.2, "sales": 0.1}'))
    response = anthropic_client(loopback).system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].probabilities == pytest.approx(
        {"billing": 0.7, "technical": 0.2, "sales": 0.1}
    )
    last = loopback.bodies("/messages")[0]["messages"][-1]
    assert last == {"role": "assistant", "content": '{"billing":'}
    assert last["content"] == last["content"].rstrip()  # Anthropic refuses trailing whitespace here


def test_the_corrective_retry_sends_the_whole_first_reply_and_the_opening_again(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body('refund"}'))
    loopback.reply("/messages", 200, messages_body('billing"}'))
    response = anthropic_client(loopback, method="discrete").system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].choice == "billing"
    retry = loopback.bodies("/messages")[1]["messages"]
    assert retry[-3] == {"role": "assistant", "content": '{"choice": "refund"}'}
    assert retry[-2]["role"] == "user" and "not a valid answer" in retry[-2]["content"]
    assert retry[-1] == {"role": "assistant", "content": DISCRETE_PREFILL}
    assert response.debug["questions"]["q"]["prefill"]["replies"] == ["continued", "continued"]


def test_no_prefill_is_sent_with_thinking_and_debug_says_why(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    asked = anthropic_client(loopback, reasoning=ReasoningConfig(budget_tokens=1024))
    response = asked.system_one(state=STATE, questions={"q": INTENT})
    assert loopback.bodies("/messages")[0]["messages"][-1]["role"] == "user"
    assert response.debug["questions"]["q"]["prefill"] is None
    assert any("thinking" in why for why in response.debug["questions"]["q"]["why"])


def test_the_prefill_can_be_turned_off_for_the_client_and_back_on_per_call(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    asked = anthropic_client(loopback, prefill=False)
    off = asked.system_one(state=STATE, questions={"q": INTENT})
    on = asked.system_one(state=STATE, questions={"q": INTENT}, prefill=True)
    first, second = loopback.bodies("/messages")
    assert first["messages"][-1]["role"] == "user" and off.debug["questions"]["q"]["prefill"] is None
    assert second["messages"][-1]["role"] == "assistant"
    assert on.debug["questions"]["q"]["prefill"] == {"sent": '{"billing":', "replies": ["echoed"]}


def test_the_async_client_sends_the_prefill_and_takes_the_same_switch(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    sdk = AsyncAnthropic(base_url=loopback.url.removesuffix("/v1"), api_key="local", max_retries=0)
    asked = AsyncSystemOneClient(sdk, model="smollm2", api="messages")
    on = asyncio.run(asked.system_one(state=STATE, questions={"q": INTENT}))
    off = asyncio.run(asked.system_one(state=STATE, questions={"q": INTENT}, prefill=False))
    first, second = loopback.bodies("/messages")
    assert first["messages"][-1] == {"role": "assistant", "content": '{"billing":'}
    assert second["messages"][-1]["role"] == "user"
    assert on.debug["questions"]["q"]["prefill"] == {"sent": '{"billing":', "replies": ["echoed"]}
    assert off.debug["questions"]["q"]["prefill"] is None


def test_a_state_ending_with_an_assistant_turn_gets_no_prefill(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body(JSON_ANSWER))
    state = [{"role": "user", "content": "Charged twice."}, {"role": "assistant", "content": "Sorry!"}]
    response = anthropic_client(loopback).system_one(state=state, questions={"q": INTENT})
    assert loopback.bodies("/messages")[0]["messages"][-1] == {"role": "assistant", "content": "Sorry!"}
    assert "no prefill: the state ends with an assistant turn" in response.debug["questions"]["q"]["why"]


def test_the_prefill_is_sent_on_the_messages_surface_only(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat_label())
    response = openai_client(loopback, api="chat_completions", method="logprobs").system_one(
        state=STATE, questions={"q": INTENT}
    )
    assert loopback.bodies()[0]["messages"][-1]["role"] == "user"
    assert response.debug["questions"]["q"]["prefill"] is None


class ChatOnly:
    """A duck-typed client: chat.completions.create returning plain dicts, no responses at all."""

    def __init__(self) -> None:
        self.chat = self
        self.completions = self
        self.sent: list[dict[str, Any]] = []

    def create(self, **kwargs: Any) -> dict[str, Any]:
        self.sent.append(kwargs)
        return chat_label("C")


def test_auto_moves_off_a_client_without_responses_and_reads_plain_dicts() -> None:
    client = ChatOnly()
    response = SystemOneClient(client, model="m").system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].choice == "billing"  # A carries the most mass, though C was sampled
    assert "responses.create" in response.debug["route"]["why"]
    sent = client.sent[0]
    assert sent["model"] == "m" and sent["extra_body"]["logprobs"] is True and sent["timeout"] == 60.0


# --- Messages: the prefilled object is the answer, and a line that closes it ends the reply ----------


def stopped_at_object_end(text: str, how: str = "end_turn") -> dict[str, Any]:
    """A reply cut at the stop sequence "}\\n", which the server leaves out of the text: llama.cpp b11549
    says end_turn and names the sequence (measured), Anthropic's API says stop_sequence."""
    body = messages_body(text, stop=how)
    body["stop_sequence"] = "}\n"
    return body


@pytest.mark.parametrize("how", ["end_turn", "stop_sequence"])
def test_a_prefilled_answer_stops_where_a_line_closes_its_object_and_the_end_is_put_back(
    loopback: Any, how: str
) -> None:
    loopback.reply("/messages", 200, stopped_at_object_end('{"choice": "billing"', how))
    response = anthropic_client(loopback, method="discrete").system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].choice == "billing"
    assert loopback.bodies("/messages")[0]["stop_sequences"] == ["}\n"]


def test_a_structured_answer_stopped_at_its_end_reads_the_whole_object(loopback: Any) -> None:
    loopback.reply("/messages", 200, stopped_at_object_end(' 0.7, "technical": 0.2, "sales": 0.1'))
    response = anthropic_client(loopback).system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].probabilities == pytest.approx(
        {"billing": 0.7, "technical": 0.2, "sales": 0.1}
    )


def test_a_prefilled_answer_is_the_object_it_opens_with_nested_keys_and_run_on_text_after_it(
    loopback: Any,
) -> None:
    # Recorded from SmolLM2 on llama.cpp b11549 (sampled): a whole object, then the prompt's schema copied.
    run_on = (
        '{"choice": "billing", "properties": {"type": "string", "enum": ["billing", "technical"]}}'
        ' {"type": "object", "properties": {"choice": "billing"}}'
    )
    loopback.reply("/messages", 200, messages_body(run_on))
    response = anthropic_client(loopback, method="discrete").system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].choice == "billing"
    assert response.usage.n_calls == 1


def test_a_prefilled_object_closed_before_the_budget_ran_out_is_read_not_reported_cut(loopback: Any) -> None:
    run_on = '{"choice": "sales"}, {"choice": "sales"}, {"ch'
    loopback.reply("/messages", 200, messages_body(run_on, "max_tokens"))
    response = anthropic_client(loopback, method="discrete").system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].choice == "sales"


def test_an_unclosed_prefilled_object_cut_by_the_budget_is_still_incomplete(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body('{"choice": "sales", "why": "because', "max_tokens"))
    with pytest.raises(IncompleteAnswerError, match="max_tokens"):
        anthropic_client(loopback, method="discrete").system_one(state=STATE, questions={"q": INTENT})


def test_two_objects_without_a_prefill_stay_ambiguous(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body('{"choice": "sales"} {"choice": "billing"}'))
    loopback.reply("/messages", 200, messages_body('{"choice": "sales"} {"choice": "billing"}'))
    asked = anthropic_client(loopback, method="discrete", prefill=False)
    with pytest.raises(MalformedAnswerError, match="2 JSON objects"):
        asked.system_one(state=STATE, questions={"q": INTENT})
    assert all("stop_sequences" not in body for body in loopback.bodies("/messages"))


def test_a_stop_sequence_the_server_did_not_name_adds_nothing(loopback: Any) -> None:
    # A reply that ended on its own keeps its text as it came.
    loopback.reply("/messages", 200, messages_body('{"choice": "sales"}'))
    response = anthropic_client(loopback, method="discrete").system_one(state=STATE, questions={"q": INTENT})
    assert answers(response)["q"].choice == "sales"


def test_a_callers_stop_sequences_win_over_jevpers(loopback: Any) -> None:
    loopback.reply("/messages", 200, messages_body('{"choice": "sales"}'))
    asked = anthropic_client(loopback, method="discrete", extra_body={"stop_sequences": ["\n\n"]})
    asked.system_one(state=STATE, questions={"q": INTENT})
    assert loopback.bodies("/messages")[0]["stop_sequences"] == ["\n\n"]
