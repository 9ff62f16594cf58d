"""The label readout, the JSON readouts and the request rules, through the real openai SDK against a
loopback server. Bodies are the recorded llama.cpp shape (tests/fixtures/client/wire) with the answer
token's alternatives set to what the rule under test needs, or transcribed from the reference."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from jevper import (
    AsyncSystemOneClient,
    Choice,
    Example,
    IncompleteAnswerError,
    InvalidQuestionError,
    LabelReadoutError,
    MalformedAnswerError,
    Noul,
    ProviderError,
    Score,
    SystemOneClient,
    SystemOneResponse,
)

INTENT = Choice(criteria={"billing": "money", "technical": "errors", "sales": "pricing"})
STATE = "I was charged twice."


def chat(content: str, first: list[tuple[str, float]] | None = None, **extra: Any) -> dict[str, Any]:
    """A Chat Completions body shaped like the recorded llama.cpp one."""
    choice: dict[str, Any] = {
        "index": 0,
        "finish_reason": extra.pop("finish", "stop"),
        "message": {"role": "assistant", "content": content, **extra.pop("message", {})},
    }
    if first is not None:
        token = content[:1] or " "
        lp = dict(first).get(token, -9.0)
        choice["logprobs"] = {
            "content": [
                {
                    "token": token,
                    "logprob": lp,
                    "top_logprobs": [{"token": t, "logprob": v} for t, v in first],
                }
            ]
        }
    usage = extra.pop("usage", {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11})
    return {"object": "chat.completion", "model": "smollm2", "choices": [choice], "usage": usage, **extra}


def answers(response: SystemOneResponse) -> dict[str, Any]:
    """The answers, typed loosely: each test knows which kind of question it asked."""
    return dict(response.answers)


def jevper(loopback: Any, **settings: Any) -> SystemOneClient:
    openai = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    return SystemOneClient(openai, model="smollm2", api=settings.pop("api", "chat_completions"), **settings)


def test_the_label_readout_is_a_softmax_over_the_labels_at_the_answer_token(loopback: Any) -> None:
    loopback.reply(
        "/chat/completions", 200, chat("A", [("A", -0.5), ("The", -1.0), ("B", -1.5), ("C", -2.5)])
    )
    answer: Any = (
        jevper(loopback, method="logprobs").system_one(state=STATE, questions={"q": INTENT}).answers["q"]
    )
    weights = [math.exp(-0.5), math.exp(-1.5), math.exp(-2.5)]
    expected = {k: w / sum(weights) for k, w in zip(INTENT.options, weights, strict=True)}
    assert answer.probabilities == pytest.approx(expected)
    sent = loopback.bodies()[0]
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 20)


def test_a_label_absent_from_the_alternatives_gets_no_mass(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat("A", [("A", -0.2), ("I", -1.0), ("B", -3.0)]))
    answer: Any = (
        jevper(loopback, method="logprobs").system_one(state=STATE, questions={"q": INTENT}).answers["q"]
    )
    assert answer.probabilities["sales"] == 0.0
    assert sum(answer.probabilities.values()) == pytest.approx(1.0)


def test_byte_level_and_spaced_spellings_of_a_label_count_for_it(loopback: Any) -> None:
    loopback.reply(
        "/chat/completions", 200, chat("A", [("A", -1.0), ("ĠA", -1.0), (" B", -1.0), ("C", -9.0)])
    )
    answer: Any = (
        jevper(loopback, method="logprobs").system_one(state=STATE, questions={"q": INTENT}).answers["q"]
    )
    assert answer.probabilities["billing"] == pytest.approx(2 * answer.probabilities["technical"], rel=1e-3)


def test_fewer_than_two_alternatives_is_not_a_distribution(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat("A", [("A", -0.1)]))
    with pytest.raises(LabelReadoutError, match="fewer than two is not a distribution"):
        jevper(loopback, method="logprobs").system_one(state=STATE, questions={"q": INTENT})
    assert len(loopback.requests) == 1


def test_auto_answers_in_json_where_no_distribution_comes_back_and_remembers_it(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat("A"))  # no logprob field at all
    loopback.reply("/chat/completions", 200, chat('{"billing": 0.8, "technical": 0.1, "sales": 0.1}'))
    loopback.reply("/chat/completions", 200, chat('{"billing": 0.2, "technical": 0.7, "sales": 0.1}'))
    asked = jevper(loopback)
    first = asked.system_one(state=STATE, questions={"q": INTENT})
    second = asked.system_one(state=STATE, questions={"q": INTENT})
    assert (answers(first)["q"].method, answers(second)["q"].method) == ("structured", "structured")
    assert "response_format" not in loopback.bodies()[0] and "logprobs" not in loopback.bodies()[1]
    assert len(loopback.requests) == 3  # the second call went straight to JSON
    assert second.debug["questions"]["q"]["why"][0].startswith("remembered: no distribution")


def test_a_trace_separating_server_is_read_at_the_answers_own_token_after_dropping_im_end(
    loopback: Any, fixtures: Any
) -> None:
    loopback.reply(
        "/chat/completions", 200, fixtures.transcribed("sglang_chat_reasoning_content_im_end")["body"]
    )
    response = jevper(loopback, method="logprobs").system_one(state=STATE, questions={"q": INTENT})
    answer: Any = response.answers["q"]
    assert answer.choice == "technical"
    assert answer.probabilities["technical"] > answer.probabilities["billing"] > answer.probabilities["sales"]
    assert response.reasoning == {"q": "Login errors are technical."}


def test_two_trailing_end_tokens_after_the_answer_are_dropped_before_the_tail_is_anchored(
    loopback: Any, fixtures: Any
) -> None:
    # The reference's allowance is two such tokens; a readout allowing one reports no anchor here.
    case = fixtures.transcribed("sglang_chat_reasoning_content_two_end_tokens")
    tail = [entry["token"] for entry in json.loads(case["body"])["choices"][0]["logprobs"]["content"][-3:]]
    assert tail == ["B", "<|im_end|>", "<|endoftext|>"]
    loopback.reply("/chat/completions", 200, case["body"])
    response = jevper(loopback, method="logprobs").system_one(state=STATE, questions={"q": INTENT})
    answer: Any = response.answers["q"]
    assert answer.choice == "technical"
    assert answer.probabilities["technical"] > answer.probabilities["billing"] > answer.probabilities["sales"]
    assert response.debug["questions"]["q"]["requests"] == 1  # read at once, no corrective retry


def test_a_stream_that_does_not_end_with_the_answer_is_reported_rather_than_guessed(loopback: Any) -> None:
    body = chat("B", message={"reasoning_content": "thinking"})
    entries = [
        {
            "token": t,
            "logprob": -0.1,
            "top_logprobs": [{"token": t, "logprob": -0.1}, {"token": "A", "logprob": -3}],
        }
        for t in ("B", "<|im_end|>", "<|endoftext|>", "x")
    ]
    body["choices"][0]["logprobs"] = {"content": entries}
    loopback.reply("/chat/completions", 200, body)
    loopback.reply("/chat/completions", 200, body)
    with pytest.raises(LabelReadoutError, match="does not; the answer token cannot be found"):
        jevper(loopback, method="logprobs").system_one(state=STATE, questions={"q": INTENT})


def test_the_grammar_method_sends_a_gbnf_restricted_to_the_labels(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat("B", [("B", -0.3), ("A", -1.0)]))
    jevper(loopback, method="grammar").system_one(state=STATE, questions={"q": INTENT})
    assert loopback.bodies()[0]["grammar"] == 'root ::= "A" | "B" | "C"'


def test_auto_sends_the_label_grammar_first_and_keeps_it_on_its_one_corrective_retry(loopback: Any) -> None:
    # A server that ignores the grammar (the reply is prose): the retry carries it again.
    loopback.reply("/chat/completions", 200, chat("The", [("The", -0.1), ("A", -2.0)]))
    loopback.reply("/chat/completions", 200, chat("A", [("A", -0.1), ("B", -2.0)]))
    answer: Any = jevper(loopback).system_one(state=STATE, questions={"q": INTENT}).answers["q"]
    first, second = loopback.bodies()
    assert first["grammar"] == second["grammar"] == 'root ::= "A" | "B" | "C"'
    assert second["messages"][-2] == {"role": "assistant", "content": "The"}
    assert answer.method == "grammar"


def test_structured_probabilities_are_rescaled_to_sum_one(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat('{"billing": 2, "technical": 1, "sales": 1}'))
    answer: Any = (
        jevper(loopback, method="structured").system_one(state=STATE, questions={"q": INTENT}).answers["q"]
    )
    assert answer.probabilities == {"billing": 0.5, "technical": 0.25, "sales": 0.25}
    schema = loopback.bodies()[0]["response_format"]["json_schema"]
    assert schema["strict"] is True and schema["schema"]["required"] == ["billing", "technical", "sales"]


def test_without_normalizing_the_models_numbers_are_reported_and_the_score_is_their_expectation(
    loopback: Any,
) -> None:
    loopback.reply("/chat/completions", 200, chat('{"0": 0, "1": 0, "2": 0.2, "3": 0.7, "4": 0.1}'))
    score = Score(["none", "low", "mid", "high", "top"])
    answer: Any = (
        jevper(loopback, method="structured", normalize_probabilities=False)
        .system_one(state=STATE, questions={"s": score})
        .answers["s"]
    )
    assert answer.probabilities == {0: 0.0, 1: 0.0, 2: 0.2, 3: 0.7, 4: 0.1}
    assert answer.score == pytest.approx(2.9)


def test_unnormalized_label_probabilities_are_the_models_own_and_the_score_uses_the_rescaled_ones(
    loopback: Any,
) -> None:
    loopback.reply(
        "/chat/completions", 200, chat("B", [("B", math.log(0.6)), ("A", math.log(0.2)), ("x", -3)])
    )
    answer: Any = (
        jevper(loopback, method="logprobs", normalize_probabilities=False)
        .system_one(state=STATE, questions={"s": Score(["low", "high"])})
        .answers["s"]
    )
    assert answer.probabilities == pytest.approx({0: 0.2, 1: 0.6})
    assert answer.score == pytest.approx(0.75)


def test_a_noul_out_of_range_is_an_error_naming_the_value(loopback: Any, fixtures: Any) -> None:
    body = fixtures.transcribed("ollama_chat_noul_out_of_range")["body"]
    loopback.reply("/chat/completions", 200, body)
    loopback.reply("/chat/completions", 200, body)
    with pytest.raises(MalformedAnswerError, match=r"'noul' must be in \[0, 1.0\], got 521304.0"):
        jevper(loopback, method="structured").system_one(state=STATE, questions={"n": Noul("Urgent?")})
    assert len(loopback.requests) == 2


def test_a_discrete_answer_is_one_hot(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat('{"noul": true}'))
    answer: Any = (
        jevper(loopback, method="discrete")
        .system_one(state=STATE, questions={"n": Noul("Urgent?")})
        .answers["n"]
    )
    assert (answer.noul, answer.probabilities, answer.confidence) == (1.0, {"yes": 1.0, "no": 0.0}, 1.0)


def test_a_json_answer_wrapped_in_prose_is_read_from_its_one_object(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat('The answer is:\n{"choice": "sales"}'))
    answer: Any = (
        jevper(loopback, method="discrete").system_one(state=STATE, questions={"q": INTENT}).answers["q"]
    )
    assert answer.choice == "sales"


def test_a_spent_budget_with_no_answer_raises_incomplete_naming_max_tokens(
    loopback: Any, fixtures: Any
) -> None:
    loopback.reply("/chat/completions", 200, fixtures.transcribed("ollama_chat_length_empty")["body"])
    with pytest.raises(IncompleteAnswerError, match="raise max_tokens") as caught:
        jevper(loopback, method="structured").system_one(state=STATE, questions={"q": INTENT})
    assert caught.value.field == "max_tokens"


def test_a_truthy_stream_is_refused_before_any_request(loopback: Any) -> None:
    with pytest.raises(InvalidQuestionError, match="expected stream to be absent or false"):
        jevper(loopback, extra_body={"stream": True})
    with pytest.raises(InvalidQuestionError, match="stream"):
        jevper(loopback).system_one(state=STATE, questions={"q": INTENT}, extra_body={"stream": 1})
    assert loopback.requests == []


def test_the_servers_refusal_of_a_callers_field_is_reported_in_its_words(
    loopback: Any, fixtures: Any
) -> None:
    record = fixtures.recorded("chat_stream_zero")
    loopback.reply("/chat/completions", record["status"], record["body"])
    with pytest.raises(ProviderError, match="refused the caller's extra_body field 'stream'") as caught:
        jevper(loopback, extra_body={"stream": 0}).system_one(state=STATE, questions={"q": INTENT})
    assert caught.value.status == 400
    assert "type must be boolean, but is number" in caught.value.server_message


def test_llamacpp_refuses_n_two_and_the_caller_is_told(loopback: Any, fixtures: Any) -> None:
    record = fixtures.recorded("chat_n_two")
    loopback.reply("/chat/completions", record["status"], record["body"])
    with pytest.raises(ProviderError, match="'n'") as caught:
        jevper(loopback, extra_body={"n": 2}).system_one(state=STATE, questions={"q": INTENT})
    assert caught.value.server_message == "Field 'n': Value must be between 1 <= value <= 1, but got 2"


def test_a_server_returning_two_choices_is_read_from_the_first(loopback: Any) -> None:
    body = chat("A", [("A", -0.1), ("B", -3.0)])
    body["choices"].append(
        {**body["choices"][0], "index": 1, "message": {"role": "assistant", "content": "C"}}
    )
    loopback.reply("/chat/completions", 200, body)
    answer: Any = (
        jevper(loopback, method="logprobs").system_one(state=STATE, questions={"q": INTENT}).answers["q"]
    )
    assert answer.choice == "billing"


def test_extra_body_is_merged_into_every_request(loopback: Any) -> None:
    for _ in range(2):
        loopback.reply("/chat/completions", 200, chat("A", [("A", -0.1), ("B", -3.0)]))
    asked = jevper(
        loopback, method="logprobs", extra_body={"chat_template_kwargs": {"enable_thinking": False}}
    )
    asked.system_one(state=STATE, questions={"q": INTENT}, extra_body={"temperature": 0})
    asked.system_one(state=STATE, questions={"q": INTENT})
    first, second = loopback.bodies()
    assert first["chat_template_kwargs"] == second["chat_template_kwargs"] == {"enable_thinking": False}
    assert first["temperature"] == 0 and "temperature" not in second


def test_the_prompt_leads_with_system_then_examples_then_question_and_puts_the_state_last(
    loopback: Any,
) -> None:
    loopback.reply("/chat/completions", 200, chat("A", [("A", -0.1), ("B", -3.0)]))
    state = [
        {"role": "user", "content": "Hi"},
        {"role": "developer", "content": "Premium customer."},
        {"role": "assistant", "content": "Hello"},
        {"role": "system", "content": "Be careful."},
        {"role": "user", "content": "I was charged twice."},
    ]
    example = Example(state="My invoice is wrong.", answers={"q": "billing"})
    jevper(loopback, method="logprobs", examples=[example]).system_one(state=state, questions={"q": INTENT})
    messages = loopback.bodies()[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "user", "user", "assistant", "user"]
    assert messages[0]["content"].endswith("Premium customer.\n\nBe careful.")
    assert "My invoice is wrong.\nAnswer: A" in messages[1]["content"]
    assert "A: billing" in messages[2]["content"]
    assert messages[3:] == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "I was charged twice."},
    ]


def test_the_derived_cache_key_covers_everything_but_the_state_and_a_callers_key_wins(loopback: Any) -> None:
    for _ in range(4):
        loopback.reply("/chat/completions", 200, chat("A", [("A", -0.1), ("B", -3.0)]))
    asked = jevper(loopback, method="logprobs")
    asked.system_one(state="one", questions={"q": INTENT})
    asked.system_one(state="two", questions={"q": INTENT})
    asked.system_one(state="two", questions={"q": Choice(criteria={"a": "x", "b": "y"})})
    asked.system_one(state="two", questions={"q": INTENT}, prompt_cache_key="tenant-7")
    keys = [b["prompt_cache_key"] for b in loopback.bodies()]
    assert keys[0] == keys[1] != keys[2]
    assert all(len(k) <= 256 for k in keys) and keys[3] == "tenant-7"
    with pytest.raises(InvalidQuestionError, match="1 to 256 characters, got 257 characters"):
        jevper(loopback, prompt_cache_key="k" * 257)


def test_usage_sums_every_request_and_a_count_one_request_left_out_is_none(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat("The", [("The", -0.1), ("A", -2.0)]))
    cached = {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}}
    loopback.reply("/chat/completions", 200, chat("A", [("A", -0.1), ("B", -2.0)], usage=cached))
    usage = jevper(loopback).system_one(state=STATE, questions={"q": INTENT}).usage
    # The first reply said nothing of the cache: a sum of the second alone would pass a part off as the whole.
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens, usage.n_calls) == (20, 2, None, 2)
    loopback.reply("/chat/completions", 200, chat("A", [("A", -0.1), ("B", -2.0)], usage=cached))
    usage = jevper(loopback, method="logprobs").system_one(state=STATE, questions={"q": INTENT}).usage
    assert (usage.cached_tokens, usage.n_calls) == (0, 1)  # a reported 0 stays 0


def test_an_unreachable_server_is_a_provider_error_within_the_timeout() -> None:
    closed = SystemOneClient(
        OpenAI(base_url="http://127.0.0.1:9/v1", api_key="local", max_retries=0), model="m", timeout=2.0
    )
    with pytest.raises(ProviderError, match="could not be reached") as caught:
        closed.system_one(state=STATE, questions={"q": INTENT})
    assert caught.value.status is None


def test_the_async_client_answers_like_the_blocking_one_in_insertion_order(loopback: Any) -> None:
    questions: dict[str, Choice | Noul | Score] = {
        "z": INTENT,
        "a": Noul("Urgent?"),
        "m": Score(["low", "high"]),
    }
    for _ in range(2):
        for content in ("A", "B", "A"):
            loopback.reply("/chat/completions", 200, chat(content, [("A", -0.4), ("B", -1.1), ("C", -2.0)]))
    blocking = jevper(loopback, method="logprobs", max_concurrency=1).system_one(
        state=STATE, questions=questions
    )
    concurrent = AsyncSystemOneClient(
        AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0),
        model="smollm2",
        method="logprobs",
        api="chat_completions",
    )
    awaited = asyncio.run(concurrent.system_one(state=STATE, questions=questions))
    assert list(awaited.answers) == list(blocking.answers) == ["z", "a", "m"]
    for qid in questions:
        assert answers(awaited)[qid].probabilities == answers(blocking)[qid].probabilities


def test_questions_may_be_plain_mappings_validated_the_same_way(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat("B", [("B", -0.1), ("A", -3.0)]))
    plain: dict[str, Any] = {"type": "choice", "criteria": {"billing": "money", "technical": "errors"}}
    answer: Any = (
        jevper(loopback, method="logprobs").system_one(state=STATE, questions={"q": plain}).answers["q"]
    )
    assert answer.choice == "technical"
    with pytest.raises(InvalidQuestionError, match="expected 'type' to be one of"):
        jevper(loopback).system_one(state=STATE, questions={"q": {"criteria": {"a": "b"}}})


def test_a_json_answer_body_is_sent_back_for_the_corrective_retry(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, chat("not json"))
    loopback.reply("/chat/completions", 200, chat('{"choice": "billing"}'))
    jevper(loopback, method="discrete").system_one(state=STATE, questions={"q": INTENT})
    retry = loopback.bodies()[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "not json"}
    assert json.dumps(retry[-1]).count("Reply with the JSON object only") == 1


def test_a_prose_token_with_no_label_among_few_alternatives_says_so(loopback: Any) -> None:
    # The reference's ollama case: top_logprobs 5 on a five-option question, no label in the five.
    few = [("The", -0.5), ("I", -1.0), ("It", -2.0), ("This", -2.5), ("You", -3.0)]
    loopback.reply("/chat/completions", 200, chat("The", few))
    loopback.reply("/chat/completions", 200, chat("The", few))
    with pytest.raises(LabelReadoutError, match="none of the 5 alternatives was among the options"):
        jevper(loopback, method="logprobs", top_logprobs=5).system_one(state=STATE, questions={"q": INTENT})
    assert [b["top_logprobs"] for b in loopback.bodies()] == [5, 5]


@pytest.mark.parametrize("limit", [1, 2, 4])
def test_both_clients_run_a_calls_questions_concurrently_up_to_max_concurrency(
    loopback: Any, limit: int
) -> None:
    # One more question than the limit, which a client ignoring it (or one past it) would have in flight
    # at once; every question past it costs the one-at-a-time case a wave of 0.3 s per client.
    questions: dict[str, Choice | Noul | Score] = {f"q{i}": INTENT for i in range(limit + 1)}
    # Long enough for every slot's request to be in flight together on two busy cores: at 0.05 s the
    # first answer once came back before the fourth request left (load 10).
    loopback.delay = 0.3
    for _ in range(12):
        loopback.reply("/chat/completions", 200, chat("A", [("A", -0.4), ("B", -1.1), ("C", -2.0)]))
    blocking = jevper(loopback, method="logprobs", max_concurrency=limit).system_one(
        state=STATE, questions=questions
    )
    assert loopback.most_in_flight == limit
    loopback.most_in_flight = 0
    concurrent = AsyncSystemOneClient(
        AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0),
        model="smollm2",
        method="logprobs",
        api="chat_completions",
        max_concurrency=limit,
    )
    awaited = asyncio.run(concurrent.system_one(state=STATE, questions=questions))
    assert loopback.most_in_flight == limit
    assert list(blocking.answers) == list(awaited.answers) == list(questions)


def test_concurrent_calls_of_one_async_client_share_its_max_concurrency(loopback: Any) -> None:
    # Two calls of three questions each against max_concurrency=2: at most two requests in flight in all,
    # as the blocking client's one pool holds them (the upstream's slots are shared by every call).
    loopback.delay = 0.1
    for _ in range(6):
        loopback.reply("/chat/completions", 200, chat("A", [("A", -0.4), ("B", -1.1), ("C", -2.0)]))
    client = AsyncSystemOneClient(
        AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0),
        model="smollm2",
        method="logprobs",
        api="chat_completions",
        max_concurrency=2,
    )
    questions: dict[str, Choice | Noul | Score] = {f"q{i}": INTENT for i in range(3)}

    async def both() -> list[Any]:
        calls = (client.system_one(state=STATE, questions=questions) for _ in range(2))
        return list(await asyncio.gather(*calls))

    answered = asyncio.run(both())
    assert [len(r.answers) for r in answered] == [3, 3]
    assert loopback.most_in_flight == 2


def test_a_surface_that_stops_carrying_logprobs_moves_auto_to_json_even_after_a_success(
    loopback: Any,
) -> None:
    loopback.reply("/chat/completions", 200, chat("A", [("A", -0.1), ("B", -2.0)]))
    loopback.reply("/chat/completions", 200, chat("A"))  # no logprob field this time
    loopback.reply("/chat/completions", 200, chat('{"billing": 0.1, "technical": 0.8, "sales": 0.1}'))
    asked = jevper(loopback)
    assert answers(asked.system_one(state=STATE, questions={"q": INTENT}))["q"].method == "grammar"
    second = asked.system_one(state=STATE, questions={"q": INTENT})
    assert answers(second)["q"].method == "structured"
    assert len(loopback.requests) == 3


def test_a_server_that_does_not_answer_in_time_is_a_provider_error_after_the_timeout(loopback: Any) -> None:
    loopback.delay = 2.0
    loopback.reply("/chat/completions", 200, chat("A", [("A", -0.1), ("B", -2.0)]))
    started = time.monotonic()
    with pytest.raises(ProviderError, match="APITimeoutError"):
        jevper(loopback, method="logprobs", timeout=0.3).system_one(state=STATE, questions={"q": INTENT})
    assert time.monotonic() - started < 1.5
