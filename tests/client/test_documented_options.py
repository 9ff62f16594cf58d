"""The documented API's client options and per-call overrides, through the real openai SDK against a
loopback server: temperature, a call's model, extra_headers on every route, the retry policy, the model
list, the response's views, examples given with one answer, and the System One route's keep_alive."""

from __future__ import annotations

import asyncio
import email.utils
import time
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from jevper import (
    AsyncSystemOneClient,
    Choice,
    ClientCapabilityError,
    ConfigError,
    Example,
    InvalidQuestionError,
    LabelReadoutError,
    MalformedAnswerError,
    ModelMetadata,
    Noul,
    ProviderError,
    RetryPolicy,
    Score,
    SystemOneClient,
    UnsupportedMethodError,
)

INTENT = Choice(criteria={"billing": "money", "technical": "errors"})
STATE = "I was charged twice."
SECRET = "sk-team-0123456789"
FAST = RetryPolicy(n_retries=2, base_delay=0.01, max_delay=0.05)


def label(text: str = "A") -> dict[str, Any]:
    top = [{"token": "A", "logprob": -0.2}, {"token": "B", "logprob": -1.9}]
    return {
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": text},
                "logprobs": {"content": [{"token": text, "logprob": -0.2, "top_logprobs": top}]},
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1},
    }


def noul_answer() -> dict[str, Any]:
    return {
        "model": "m",
        "answers": {"q": {"type": "noul", "noul": 0.7}},
        "usage": {"input_tokens": 3, "output_tokens": 0},
    }


def sdk(loopback: Any) -> OpenAI:
    return OpenAI(base_url=loopback.url, api_key="local", max_retries=0)


def client(loopback: Any, **options: Any) -> SystemOneClient:
    options.setdefault("api", "chat_completions")
    options.setdefault("method", "logprobs")
    return SystemOneClient(sdk(loopback), model="m", **options)


def test_the_clients_temperature_is_sent_and_a_call_may_set_its_own_and_its_own_model(loopback: Any) -> None:
    for _ in range(3):
        loopback.reply("/chat/completions", 200, label())
    asked = client(loopback, temperature=0.7)
    asked.system_one(state=STATE, questions={"q": INTENT})
    asked.system_one(state=STATE, questions={"q": INTENT}, temperature=0, model="other")
    client(loopback).system_one(state=STATE, questions={"q": INTENT})
    first, second, plain = loopback.bodies("/chat/completions")
    assert (first["temperature"], first["model"]) == (0.7, "m")
    assert (second["temperature"], second["model"]) == (0, "other")
    assert "temperature" not in plain


def test_extra_headers_travel_on_every_request_and_debug_shows_only_their_names(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, label())
    loopback.reply("/systemone", 200, noul_answer())
    loopback.model_list(200, {"models": [{"name": "m", "description": "d", "release_date": "2026-11-01"}]})
    headers = {"X-Team": SECRET}
    asked = client(loopback, extra_headers=headers)
    response = asked.system_one(state=STATE, questions={"q": INTENT})
    native = SystemOneClient(sdk(loopback), model="m", api="systemone", extra_headers=headers)
    native.system_one(state=STATE, questions={"q": Noul(instructions="Angry?")})
    assert native.list_models() == [ModelMetadata("m", "d", "2026-11-01")]
    sent = [r.headers.get("x-team") for r in (*loopback.requests, *loopback.listed)]
    assert sent == [SECRET, SECRET, SECRET]
    assert response.debug["extra_headers"] == {"X-Team": "<redacted>"}
    assert SECRET not in repr(response) and SECRET not in repr(asked.options)
    assert SECRET not in repr(asked.options.sending)


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        ({"X Team": "a"}, "cannot be sent"),
        ({"X-Team": SECRET + "\r\nX-Other: 1"}, "character 0xd at position 18"),
        ({"X-Team": "caf\u00e9"}, "printable ASCII"),
    ],
    ids=["space-in-name", "line-break-in-value", "non-ascii-value"],
)
def test_a_header_that_cannot_travel_is_a_config_error_when_the_client_is_made(
    headers: dict[str, str], words: str
) -> None:
    with pytest.raises(ConfigError, match=words) as refused:
        SystemOneClient(
            OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k"), model="m", extra_headers=headers
        )
    assert SECRET not in str(refused.value)


def rate_limited(loopback: Any, *headers: tuple[str, str]) -> None:
    loopback.reply("/chat/completions", 429, {"error": {"message": "slow down"}}, headers=headers)


def test_a_429_is_retried_after_its_retry_after_and_usage_counts_the_retry_and_the_wait(
    loopback: Any,
) -> None:
    rate_limited(loopback, ("Retry-After", "1"))
    loopback.reply("/chat/completions", 200, label())
    usage = client(loopback, retry=FAST).system_one(state=STATE, questions={"q": INTENT}).usage
    assert (usage.n_calls, usage.n_retries) == (1, 1)
    assert 1.0 <= usage.latency < 1.0 * 1.25 + 1.0  # the server's second, stretched by up to the jitter


def test_an_http_date_and_retry_after_ms_are_read_and_the_async_client_counts_alike(loopback: Any) -> None:
    rate_limited(loopback, ("Retry-After", email.utils.formatdate(time.time() + 1, usegmt=True)))
    rate_limited(loopback, ("retry-after-ms", "50"))
    loopback.reply("/chat/completions", 200, label())

    async def ask() -> Any:
        sdk = AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0)
        asked = AsyncSystemOneClient(sdk, model="m", api="chat_completions", method="logprobs", retry=FAST)
        usage = (await asked.system_one(state=STATE, questions={"q": INTENT})).usage
        await asked.close()  # the documented name of aclose()
        assert asked.closed
        return usage

    usage = asyncio.run(ask())
    assert (usage.n_calls, usage.n_retries) == (1, 2) and usage.latency >= 0.05


def test_no_retries_fails_on_the_first_429_and_the_backoff_follows_the_policy(loopback: Any) -> None:
    rate_limited(loopback)
    with pytest.raises(ProviderError) as failed:
        client(loopback, retry=RetryPolicy(n_retries=0)).system_one(state=STATE, questions={"q": INTENT})
    assert failed.value.status_code == 429 and len(loopback.requests) == 1
    rate_limited(loopback)
    rate_limited(loopback)
    loopback.reply("/chat/completions", 200, label())
    slow = RetryPolicy(n_retries=2, base_delay=0.2, max_delay=0.3)
    usage = client(loopback, retry=slow).system_one(state=STATE, questions={"q": INTENT}).usage
    # min(0.2 * 3**0, 0.3) + min(0.2 * 3**1, 0.3), each shortened by at most a quarter; the default
    # policy's waits would take at least 1.5 s, and 0.9 s is room for a stall of a loaded machine.
    assert usage.n_retries == 2 and 0.5 * 0.75 <= usage.latency < 0.5 + 0.9


def test_x_should_retry_outranks_the_status_and_respect_retry_after_false_uses_the_backoff(
    loopback: Any,
) -> None:
    loopback.reply(
        "/chat/completions", 503, {"error": {"message": "busy"}}, headers=[("x-should-retry", "false")]
    )
    with pytest.raises(ProviderError, match="busy"):
        client(loopback, retry=FAST).system_one(state=STATE, questions={"q": INTENT})
    assert len(loopback.requests) == 1
    loopback.reply(
        "/chat/completions", 400, {"error": {"message": "odd"}}, headers=[("x-should-retry", "true")]
    )
    rate_limited(loopback, ("Retry-After", "20"))
    loopback.reply("/chat/completions", 200, label())
    deaf = RetryPolicy(n_retries=2, base_delay=0.01, max_delay=0.05, respect_retry_after=False)
    usage = client(loopback, retry=deaf).system_one(state=STATE, questions={"q": INTENT}).usage
    assert usage.n_retries == 2 and usage.latency < 5


def test_list_models_reads_a_system_one_list_and_calls_an_openai_list_the_wrong_shape(loopback: Any) -> None:
    loopback.model_list(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
    with pytest.raises(MalformedAnswerError, match="OpenAI-style list"):
        client(loopback).list_models()


def test_the_response_views_split_the_answers_by_kind_and_to_decision_names_each(loopback: Any) -> None:
    for _ in range(3):
        loopback.reply("/chat/completions", 200, label())
    questions = {
        "team": INTENT,
        "angry": Noul(instructions="Angry?"),
        "urgency": Score(criteria=["low", "high"]),
    }
    response = client(loopback, max_concurrency=1).system_one(state=STATE, questions=questions)
    assert (list(response.choices), list(response.nouls), list(response.scores)) == (
        ["team"],
        ["angry"],
        ["urgency"],
    )
    decision = response.to_decision()
    assert [(a.type, a.name) for a in decision.answers] == [
        ("choice", "team"),
        ("predicate", "angry"),
        ("score", "urgency"),
    ]
    assert decision.answers[0].choice == response.choices["team"].choice  # type: ignore[union-attr]
    assert decision.usage.input_tokens == 30


def test_an_example_given_with_one_answer_teaches_the_questions_it_fits(loopback: Any) -> None:
    for _ in range(2):
        loopback.reply("/chat/completions", 200, label())
    questions = {"team": INTENT, "angry": Noul(instructions="Angry?")}
    plain = [Example(state="The app crashes.", answer="technical")]
    client(loopback, examples=plain, max_concurrency=1).system_one(state=STATE, questions=questions)
    team, angry = (str(body["messages"]) for body in loopback.bodies("/chat/completions"))
    assert "The app crashes." in team and "The app crashes." not in angry  # "technical" is no yes/no
    loopback.reply("/chat/completions", 200, label())
    by_question = {
        "angry": [Example(state="I am furious!", answer=True, probabilities={True: 0.9, False: 0.1})]
    }
    client(loopback, examples=by_question).system_one(state=STATE, questions={"angry": questions["angry"]})
    assert "I am furious!" in str(loopback.bodies("/chat/completions")[-1]["messages"])


def test_an_example_given_on_a_question_wins_over_the_calls_and_the_clients_for_it(loopback: Any) -> None:
    for _ in range(2):
        loopback.reply("/chat/completions", 200, label())
    own = Choice(
        type="choice",
        criteria=dict(INTENT.criteria),
        examples=[Example(state="My invoice is wrong.", answer="billing")],
    )
    client_wide = [Example(state="The app crashes.", answers={"team": "technical", "angry": False})]
    per_call = [Example(state="Where is my refund?", answers={"team": "billing"})]
    asked = client(loopback, examples=client_wide, max_concurrency=1)
    asked.system_one(
        state=STATE, questions={"team": own, "angry": Noul(instructions="Angry?")}, examples=per_call
    )
    team, angry = (str(body["messages"]) for body in loopback.bodies("/chat/completions"))
    # The question's own example alone teaches it; the call's replaced the client's, and keeps teaching
    # the other question nothing it does not answer.
    assert "My invoice is wrong." in team
    assert "Where is my refund?" not in team and "The app crashes." not in team
    assert "My invoice is wrong." not in angry and "Where is my refund?" not in angry
    with pytest.raises(InvalidQuestionError, match="expected type='noul' for a Noul"):
        Noul(type="choice")
    with pytest.raises(InvalidQuestionError, match="expected examples to be a list of Example"):
        Score(criteria=["low", "high"], examples="one")
    with pytest.raises(ClientCapabilityError, match="example"):
        SystemOneClient(sdk(loopback), model="m", native=True).system_one(
            state=STATE, questions={"team": own}
        )


def test_keep_alive_travels_on_system_one_and_is_refused_where_no_route_carries_it(loopback: Any) -> None:
    loopback.reply("/systemone", 200, noul_answer())
    native = SystemOneClient(sdk(loopback), model="m", native=True, temperature=0)
    native.system_one(state=STATE, questions={"q": Noul(instructions="Angry?")}, keep_alive="5m")
    body = loopback.bodies("/systemone")[0]
    assert (body["keep_alive"], body["temperature"]) == ("5m", 0)
    with pytest.raises(ClientCapabilityError, match="only the System One route carries keep_alive"):
        client(loopback).system_one(state=STATE, questions={"q": INTENT}, keep_alive="5m")
    with pytest.raises(ClientCapabilityError, match="LayaExtras"):
        client(loopback).system_one(state=STATE, questions={"q": INTENT}, extras=["laya"])


def test_noul_requires_question_refuses_a_noul_without_instructions_only_when_asked(loopback: Any) -> None:
    with pytest.raises(InvalidQuestionError, match="noul_requires_question=True") as refused:
        client(loopback, noul_requires_question=True).system_one(state=STATE, questions={"q": Noul()})
    assert refused.value.loc == ("questions", "q", "instructions") and loopback.requests == []


def test_n_retry_malformed_zero_reports_prose_without_asking_again(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, label("The"))
    with pytest.raises(LabelReadoutError, match="n_retry_malformed=0"):
        client(loopback, n_retry_malformed=0).system_one(state=STATE, questions={"q": INTENT})
    assert len(loopback.requests) == 1
    with pytest.raises(ConfigError, match="an integer of 0 or more"):
        client(loopback, n_retry_malformed=-1)
    with pytest.raises(ConfigError, match=r"True .* or False"):
        client(loopback, structured_outputs="no")


def test_n_retry_malformed_allows_that_many_corrective_re_asks(loopback: Any) -> None:
    for _ in range(3):
        loopback.reply("/chat/completions", 200, label("The"))
    loopback.reply("/chat/completions", 200, label("A"))
    answer = (
        client(loopback, n_retry_malformed=3).system_one(state=STATE, questions={"q": INTENT}).answers["q"]
    )
    assert answer.choice == "billing"  # type: ignore[union-attr]
    assert len(loopback.requests) == 4
    # Each re-ask continues the conversation: the last carries the three prose replies and corrections.
    assert len(loopback.requests[-1].json()["messages"]) == len(loopback.requests[0].json()["messages"]) + 6
    for _ in range(3):
        loopback.reply("/chat/completions", 200, label("The"))
    with pytest.raises(LabelReadoutError, match="after 2 corrective retries"):
        client(loopback, n_retry_malformed=2).system_one(state=STATE, questions={"q": INTENT})
    assert len(loopback.requests) == 7


def test_structured_outputs_false_never_sends_a_schema_or_a_grammar(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, label("The"))
    loopback.reply("/chat/completions", 200, label("A"))
    never = client(loopback, method="auto", structured_outputs=False)
    assert never.system_one(state=STATE, questions={"q": INTENT}).answers["q"].choice == "billing"  # type: ignore[union-attr]
    sent = [r.json() for r in loopback.requests]
    assert len(sent) == 2  # the corrective retry too
    assert all("grammar" not in body and "response_format" not in body for body in sent)
    # A method that needs a schema or a grammar is refused, naming it, before any request.
    for method, needed in (
        ("grammar", "a GBNF grammar"),
        ("structured", "a JSON schema"),
        ("discrete", "a JSON schema"),
    ):
        with pytest.raises(
            UnsupportedMethodError, match=f"method='{method}' with structured_outputs=False.*{needed}"
        ):
            client(loopback, method=method, structured_outputs=False)
        with pytest.raises(UnsupportedMethodError, match=f"method='{method}'"):
            never.system_one(state=STATE, questions={"q": INTENT}, method=method)
    assert len(loopback.requests) == 2


def test_decisions_create_takes_a_calls_model_temperature_and_keep_alive_as_system_one_does(
    loopback: Any,
) -> None:
    loopback.reply("/chat/completions", 200, label())
    predicate = {"type": "predicate", "name": "refund", "instructions": "Does the customer want money back?"}
    asked = client(loopback, temperature=0.5, extra_headers={"X-Team": "t"})
    decision = asked.decisions.create(input=STATE, questions=[predicate], model="other", temperature=0)
    sent = loopback.requests[-1]
    assert decision.answers[0].type == "predicate"
    assert (sent.json()["model"], sent.json()["temperature"], sent.headers.get("x-team")) == ("other", 0, "t")
    with pytest.raises(ClientCapabilityError, match="keep_alive"):
        asked.decisions.create(input=STATE, questions=[predicate], keep_alive="5m")


def test_n_retry_malformed_zero_asks_an_unreadable_json_answer_only_once(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, label("no JSON here"))
    with pytest.raises(MalformedAnswerError, match="n_retry_malformed=0"):
        client(loopback, method="structured", n_retry_malformed=0).system_one(
            state=STATE, questions={"q": INTENT}
        )
    assert len(loopback.requests) == 1
