"""OpenAI's Decisions API spoken by the client: the request mapped onto jevper's questions and state, its
rules with the param each refusal names, the answers mapped back (validated by the openai SDK's own
``Decision`` model), a refusal costing only its question, and api="decisions" asking a server's own
POST /v1/decisions; through the real openai SDK against loopback servers."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai.types
import pytest
from _decisions_data import REFUSAL
from openai import AsyncOpenAI, OpenAI

from jevper import (
    AsyncSystemOneClient,
    Choice,
    InvalidDecisionError,
    InvalidQuestionError,
    MalformedAnswerError,
    Noul,
    ProviderError,
    Score,
    SystemOneClient,
)
from jevper._wire.decisions import body_violations
from jevper.decisions import (
    DecisionChoice,
    DecisionPredicate,
    DecisionRefusal,
    DecisionScore,
    decision_request,
    param,
)
from jevper.testing.faults import FaultServer, running

QUESTIONS: list[dict[str, Any]] = [
    {"type": "predicate", "name": "refund", "instructions": "Does the customer want money back?"},
    {
        "type": "choice",
        "name": "topic",
        "instructions": "What is the message about?",
        "choices": [
            {"value": "billing", "description": "payments, charges, refunds"},
            {"value": "shipping"},
            {"value": "technical", "description": "bugs"},
        ],
    },
    {
        "type": "choice",
        "instructions": [{"type": "input_text", "text": "Is the customer right?"}],
        "choices": [{"value": True}, {"value": False}],
    },
    {
        "type": "score",
        "name": "urgency",
        "instructions": "How urgent is this?",
        "levels": [{"label": "low", "description": "can wait"}, {"label": "medium"}, {"label": "high"}],
    },
]
INPUT = "I was charged twice for the same subscription this month."
#: A Chat Completions answer: label A, with its alternatives.
LABEL = {
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "A"},
            "logprobs": {
                "content": [
                    {
                        "token": "A",
                        "logprob": -0.1,
                        "top_logprobs": [{"token": "A", "logprob": -0.1}, {"token": "B", "logprob": -2.4}],
                    }
                ]
            },
        }
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 1},
}


def body(**changes: Any) -> dict[str, Any]:
    made: dict[str, Any] = {"model": "m", "input": INPUT, "questions": copy.deepcopy(QUESTIONS)}
    made.update(changes)
    return made


def validated(response: Any) -> openai.types.Decision:
    return openai.types.Decision.model_validate(response.to_api())


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with running("m") as started:
        yield started


def client(url: str, **options: Any) -> SystemOneClient:
    return SystemOneClient(OpenAI(base_url=url, api_key="local", max_retries=0), model="m", **options)


def test_the_decisions_api_is_one_package_with_no_module_of_it_beside_the_package() -> None:
    package = Path(decision_request.__code__.co_filename).parents[1]
    assert sorted(path.name for path in package.glob("*decision*")) == ["decisions"]
    assert (package / "decisions" / "__init__.py").is_file()


# ---- the request, mapped ---------------------------------------------------------------------------------


def test_each_question_type_becomes_the_jevper_question_of_the_same_meaning() -> None:
    request = decision_request(body())
    refund, topic, right, urgency = (q.question for q in request.questions)
    assert refund == Noul(instructions="Does the customer want money back?")
    assert topic == Choice(
        {"billing": "payments, charges, refunds", "shipping": None, "technical": "bugs"},
        instructions="What is the message about?",
    )
    assert right == Choice({"true": None, "false": None}, instructions="Is the customer right?")
    assert urgency == Score(["low: can wait", "medium", "high"], instructions="How urgent is this?")
    assert [q.name for q in request.questions] == ["refund", "topic", None, "urgency"]
    assert request.questions[2].values == (True, False)
    assert request.questions[3].labels == ("low", "medium", "high")


def test_a_string_and_a_boolean_of_the_same_text_are_two_values_spelled_apart_for_the_model() -> None:
    question = {
        "type": "choice",
        "instructions": "Which?",
        "choices": [{"value": "true"}, {"value": True}, {"value": "true (boolean)"}, {"value": False}],
    }
    asked = decision_request(body(questions=[question])).questions[0]
    assert asked.values == ("true", True, "true (boolean)", False)
    assert asked.question.options == ("true", "true (boolean 2)", "true (boolean)", "false")


def test_question_instructions_given_as_parts_read_as_text_and_json() -> None:
    question = {
        "type": "predicate",
        "instructions": [
            {"type": "input_text", "text": "Does this order match the policy?"},
            {"type": "input_json", "data": {"policy": "refunds within 30 days"}},
        ],
    }
    asked = decision_request(body(questions=[question])).questions[0]
    assert (
        asked.question.instructions
        == 'Does this order match the policy?\n{"policy": "refunds within 30 days"}'
    )
    assert asked.body["instructions"][1] == {
        "type": "input_json",
        "data": {"policy": "refunds within 30 days"},
    }


def test_messages_calls_and_outputs_become_the_state_in_order_with_system_and_developer_leading() -> None:
    given = [
        {"role": "system", "content": "You sort support tickets."},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Order 7 never came."},
                {"type": "input_json", "data": {"order": 7}},
            ],
        },
        {"type": "function_call", "call_id": "c1", "name": "track", "arguments": '{"order": 7}'},
        {"type": "function_call_output", "call_id": "c1", "output": "lost in transit"},
        {
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Sorry, it was lost."}],
            "phase": "final_answer",
        },
        {"role": "developer", "content": "Be strict."},
    ]
    request = decision_request(body(input=given), instructions="Answer for the support team.")
    state = request.state("api='auto'")
    assert state[0] == {"role": "developer", "content": "Answer for the support team."}
    assert state[1] == {"role": "system", "content": "You sort support tickets."}
    assert state[2] == {"role": "user", "content": 'Order 7 never came.\n{"order": 7}'}
    assert state[3]["role"] == "assistant" and json.loads(state[3]["content"]) == {
        "type": "function_call",
        "arguments": '{"order": 7}',
        "call_id": "c1",
        "name": "track",
    }
    assert state[4]["role"] == "user"
    assert json.loads(state[4]["content"])["output"] == "lost in transit"
    assert state[5] == {"role": "assistant", "content": "Sorry, it was lost."}
    assert state[6] == {"role": "developer", "content": "Be strict."}
    # As POST /v1/decisions takes it: the instructions a leading developer message, the rest as given.
    sent = request.body()["input"]
    assert sent[0] == {"type": "message", "role": "developer", "content": "Answer for the support team."}
    assert sent[5]["phase"] == "final_answer"


def test_text_input_with_instructions_becomes_a_developer_and_a_user_message() -> None:
    request = decision_request(body(), instructions="Be strict.")
    assert request.state("api='auto'") == [
        {"role": "developer", "content": "Be strict."},
        {"role": "user", "content": INPUT},
    ]


def test_a_param_path_is_spelled_as_openai_spells_it() -> None:
    assert param(("questions", 3, "choices", 1, "value")) == "questions[3].choices[1].value"
    assert param(("input",)) == "input"


# ---- the request's rules ---------------------------------------------------------------------------------


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


NESTED = nested(33)


def many(n: int) -> list[dict[str, Any]]:
    return [{"value": f"option {i}"} for i in range(n)]


INVALID = [
    ("no questions", {"questions": []}, "questions", "empty_array"),
    ("401 questions", {"questions": [QUESTIONS[0]] * 401}, "questions", "array_above_max_length"),
    ("questions not a list", {"questions": {"a": QUESTIONS[0]}}, "questions", "invalid_type"),
    (
        "an unknown type",
        {"questions": [{"type": "rank", "instructions": "x"}]},
        "questions[0].type",
        "invalid_value",
    ),
    ("no type", {"questions": [{"instructions": "x"}]}, "questions[0].type", "missing_required_parameter"),
    (
        "no instructions",
        {"questions": [{"type": "predicate"}]},
        "questions[0].instructions",
        "missing_required_parameter",
    ),
    (
        "one option",
        {"questions": [{"type": "choice", "instructions": "x", "choices": many(1)}]},
        "questions[0].choices",
        "array_below_min_length",
    ),
    (
        "256 options",
        {"questions": [{"type": "choice", "instructions": "x", "choices": many(256)}]},
        "questions[0].choices",
        "array_above_max_length",
    ),
    (
        "duplicate values",
        {
            "questions": [
                {
                    "type": "choice",
                    "instructions": "x",
                    "choices": [{"value": "a"}, {"value": "b"}, {"value": "a"}],
                }
            ]
        },
        "questions[0].choices[2].value",
        "invalid_value",
    ),
    (
        "a number as a value",
        {"questions": [{"type": "choice", "instructions": "x", "choices": [{"value": 1}, {"value": 2}]}]},
        "questions[0].choices[0].value",
        "invalid_type",
    ),
    (
        "one level",
        {"questions": [{"type": "score", "instructions": "x", "levels": [{"label": "a"}]}]},
        "questions[0].levels",
        "array_below_min_length",
    ),
    (
        "a level without a label",
        {
            "questions": [
                {"type": "score", "instructions": "x", "levels": [{"label": "a"}, {"description": "b"}]}
            ]
        },
        "questions[0].levels[1].label",
        "missing_required_parameter",
    ),
    (
        "an unknown question field",
        {"questions": [{"type": "predicate", "instructions": "x", "levels": []}]},
        "questions[0].levels",
        "unknown_parameter",
    ),
    ("an unknown body field", {"temperature": 0}, "temperature", "unknown_parameter"),
    ("no model", {"model": None}, "model", "missing_required_parameter"),
    ("empty input", {"input": ""}, "input", "invalid_value"),
    ("an unknown role", {"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "invalid_value"),
    (
        "a JSON part in a system message",
        {"input": [{"role": "system", "content": [{"type": "input_json", "data": {}}]}]},
        "input[0].content[0].type",
        "invalid_value",
    ),
    (
        "a JSON part that is a number",
        {"input": [{"role": "user", "content": [{"type": "input_json", "data": 3}]}]},
        "input[0].content[0].data",
        "invalid_type",
    ),
    (
        "an output without its call",
        {
            "input": [
                {"role": "user", "content": "x"},
                {"type": "function_call_output", "call_id": "c9", "output": "y"},
            ]
        },
        "input[1].call_id",
        "invalid_value",
    ),
    (
        "an item with neither a type nor a role",
        {"input": [{"content": "x"}]},
        "input[0].type",
        "missing_required_parameter",
    ),
    (
        "JSON nested deeper than 32 levels",
        {"input": [{"role": "user", "content": [{"type": "input_json", "data": NESTED}]}]},
        "input[0].content[0].data",
        "invalid_value",
    ),
    (
        "an unknown input item",
        {"input": [{"type": "reasoning", "summary": []}]},
        "input[0].type",
        "invalid_value",
    ),
    (
        "a cache ttl OpenAI does not take",
        {"prompt_cache_options": {"ttl": "1h"}},
        "prompt_cache_options.ttl",
        "invalid_value",
    ),
    ("an empty cache key", {"prompt_cache_key": ""}, "prompt_cache_key", "invalid_value"),
    (
        "a cache key longer than a prompt cache key may be",
        {"prompt_cache_key": "k" * 257},
        "prompt_cache_key",
        "string_above_max_length",
    ),
    (
        "an empty choice description",
        {
            "questions": [
                {
                    "type": "choice",
                    "instructions": "x",
                    "choices": [{"value": "a"}, {"value": "b", "description": ""}],
                }
            ]
        },
        "questions[0].choices[1].description",
        "invalid_value",
    ),
    (
        "an empty level description",
        {
            "questions": [
                {
                    "type": "score",
                    "instructions": "x",
                    "levels": [{"label": "a"}, {"label": "b", "description": " "}],
                }
            ]
        },
        "questions[0].levels[1].description",
        "invalid_value",
    ),
    (
        "instructions of empty text parts",
        {"questions": [{"type": "predicate", "instructions": [{"type": "input_text", "text": " "}]}]},
        "questions[0].instructions",
        "invalid_value",
    ),
    (
        "a cache breakpoint in a question's instructions",
        {
            "questions": [
                {
                    "type": "predicate",
                    "instructions": [
                        {"type": "input_text", "text": "x", "prompt_cache_breakpoint": {"mode": "explicit"}}
                    ],
                }
            ]
        },
        "questions[0].instructions[0].prompt_cache_breakpoint",
        "unknown_parameter",
    ),
]


@pytest.mark.parametrize(
    ("change", "where", "code"), [case[1:] for case in INVALID], ids=[case[0] for case in INVALID]
)
def test_a_request_that_breaks_the_schema_is_refused_naming_the_param_and_the_code(
    change: dict[str, Any], where: str, code: str
) -> None:
    with pytest.raises(InvalidDecisionError) as refused:
        decision_request(body(**change))
    assert (refused.value.param, refused.value.code) == (where, code)
    assert str(refused.value).startswith(f"{where}: expected ")
    envelope = refused.value.to_api()["error"]
    assert envelope == {
        "message": str(refused.value),
        "type": "invalid_request_error",
        "param": where,
        "code": code,
    }


def test_a_cache_key_of_the_longest_length_a_key_may_have_is_taken() -> None:
    assert decision_request(body(prompt_cache_key="k" * 256)).prompt_cache_key == "k" * 256


def test_a_cache_breakpoint_is_taken_on_an_input_part_as_the_sdks_types_allow() -> None:
    part = {"type": "input_text", "text": "x", "prompt_cache_breakpoint": {"mode": "explicit"}}
    request = decision_request(body(input=[{"role": "user", "content": [part]}]))
    assert request.body()["input"][0]["content"] == [part]


def test_the_client_refuses_a_cache_key_too_long_as_the_requests_param_before_any_request(
    loopback: Any,
) -> None:
    with pytest.raises(InvalidDecisionError) as refused:
        client(loopback.url).decisions.create(input=INPUT, questions=QUESTIONS, prompt_cache_key="k" * 257)
    assert (refused.value.param, refused.value.code) == ("prompt_cache_key", "string_above_max_length")
    assert loopback.requests == []


def test_the_client_refuses_an_invalid_request_before_any_request(server: FaultServer) -> None:
    with pytest.raises(InvalidDecisionError) as refused:
        client(server.base_url()).decisions.create(input=INPUT, questions=[])
    assert refused.value.param == "questions"
    assert isinstance(refused.value, InvalidQuestionError)


def test_an_image_is_refused_before_any_request_on_a_surface_that_reads_none(loopback: Any) -> None:
    given = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Is this damaged?"},
                {"type": "input_image", "image_url": "https://example.com/box.png"},
            ],
        }
    ]
    with pytest.raises(InvalidDecisionError) as refused:
        client(loopback.url, api="chat_completions").decisions.create(input=given, questions=QUESTIONS)
    assert (refused.value.param, refused.value.code) == ("input[0].content[1]", "unsupported_value")
    assert "reads no images" in str(refused.value) and "api='decisions'" in str(refused.value)
    assert loopback.requests == []


def test_an_image_in_a_questions_instructions_is_refused_naming_the_part(loopback: Any) -> None:
    question = {
        "type": "predicate",
        "instructions": [
            {"type": "input_text", "text": "Same box?"},
            {"type": "input_image", "image_url": "data:image/png;base64,AA=="},
        ],
    }
    with pytest.raises(InvalidDecisionError) as refused:
        client(loopback.url, api="responses").decisions.create(input=INPUT, questions=[question])
    assert refused.value.param == "questions[0].instructions[1]"
    assert loopback.requests == []


@pytest.mark.parametrize("api", ["chat_completions", "responses"])
def test_input_of_system_messages_alone_is_refused_on_the_prompt_surfaces(
    server: FaultServer, api: str
) -> None:
    # Named surfaces: under api="auto" a server's own POST /v1/decisions (the fault server has one) is
    # asked first, and it takes such input as it sees fit.
    before = len(server.log)
    with pytest.raises(InvalidDecisionError) as refused:
        client(server.base_url(), api=api).decisions.create(
            input=[{"role": "system", "content": "x"}], questions=QUESTIONS
        )
    assert refused.value.param == "input"
    assert len(server.log) == before  # refused before any request


def test_system_one_is_not_asked_through_the_decisions_api(server: FaultServer) -> None:
    with pytest.raises(InvalidQuestionError, match=r"decisions\.create"):
        client(server.base_url(), api="decisions").system_one(state=INPUT, questions={"q": Noul()})


# ---- the answers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat_completions", "responses", "systemone"])
def test_the_answers_validate_as_openais_decision_in_question_order_with_names_kept(
    server: FaultServer, api: str
) -> None:
    response = client(server.base_url(), api=api).decisions.create(input=INPUT, questions=QUESTIONS)
    decision = validated(response)
    assert [a.type for a in decision.answers] == ["predicate", "choice", "choice", "score"]
    assert [a.name for a in decision.answers] == ["refund", "topic", None, "urgency"]
    topic, right, urgency = response.answers[1], response.answers[2], response.answers[3]
    assert isinstance(topic, DecisionChoice) and [p.value for p in topic.probabilities] == [
        "billing",
        "shipping",
        "technical",
    ]
    assert isinstance(right, DecisionChoice) and [p.value for p in right.probabilities] == [True, False]
    assert right.choice is True or right.choice is False
    assert isinstance(urgency, DecisionScore)
    assert [(p.value, p.label) for p in urgency.probabilities] == [(0, "low"), (1, "medium"), (2, "high")]
    assert urgency.score == pytest.approx(sum(p.value * p.probability for p in urgency.probabilities))
    for answer in (topic, right, urgency):
        assert sum(p.probability for p in answer.probabilities) == pytest.approx(1.0)
    assert decision.usage.total_tokens == decision.usage.input_tokens + decision.usage.output_tokens > 0
    assert decision.model == "m"


def test_a_question_the_model_refuses_is_a_refusal_and_the_others_still_answer(loopback: Any) -> None:
    for reply in (LABEL, REFUSAL, LABEL):
        loopback.reply("/chat/completions", 200, reply)
    response = client(
        loopback.url, api="chat_completions", method="logprobs", max_concurrency=1
    ).decisions.create(input=INPUT, questions=[QUESTIONS[0], QUESTIONS[1], QUESTIONS[2]])
    decision = validated(response)
    assert [a.type for a in decision.answers] == ["predicate", "refusal", "choice"]
    assert decision.answers[1].name == "topic"
    refused = response.answers[1]
    assert isinstance(refused, DecisionRefusal) and refused.reason
    assert "refused" in response.debug["questions"]["questions[1]"]
    assert isinstance(response.answers[0], DecisionPredicate) and response.answers[0].probability > 0.5


def prose(prompt_tokens: int) -> dict[str, Any]:
    """A Chat Completions answer in words, not a label: the readout asks again (its corrective retry)."""
    return {
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Well, the customer"},
                "logprobs": {
                    "content": [
                        {
                            "token": "Well",
                            "logprob": -0.2,
                            "top_logprobs": [
                                {"token": "Well", "logprob": -0.2},
                                {"token": "The", "logprob": -1.9},
                            ],
                        }
                    ]
                },
            }
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 5},
    }


#: The server failing the corrective retry: a 503 in no words the wording table knows.
UNAVAILABLE = (503, "<html><h1>503 Service Unavailable</h1></html>", "text/html")


def test_a_server_failure_on_the_corrective_retry_fails_the_call_instead_of_a_refusal(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, prose(600))
    loopback.reply("/chat/completions", *UNAVAILABLE)
    with pytest.raises(ProviderError) as failed:
        client(loopback.url, api="chat_completions", method="logprobs", max_concurrency=1).decisions.create(
            input=INPUT, questions=[QUESTIONS[0]]
        )
    assert failed.value.status == 503
    assert len(loopback.requests) == 2


def test_the_async_client_fails_the_call_on_a_server_failure_of_the_corrective_retry(loopback: Any) -> None:
    loopback.reply("/chat/completions", 200, prose(600))
    loopback.reply("/chat/completions", *UNAVAILABLE)

    async def ask() -> Any:
        sdk = AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0)
        jevper_client = AsyncSystemOneClient(sdk, model="m", api="chat_completions", method="logprobs")
        return await jevper_client.decisions.create(input=INPUT, questions=[QUESTIONS[0]])

    with pytest.raises(ProviderError) as failed:
        asyncio.run(ask())
    assert failed.value.status == 503


def test_the_usage_counts_the_requests_of_a_refused_question(loopback: Any) -> None:
    for reply in (LABEL, prose(600), prose(610)):  # the second question answers prose twice: a refusal
        loopback.reply("/chat/completions", 200, reply)
    response = client(
        loopback.url, api="chat_completions", method="logprobs", max_concurrency=1
    ).decisions.create(input=INPUT, questions=[QUESTIONS[0], QUESTIONS[1]])
    assert [a.type for a in validated(response).answers] == ["predicate", "refusal"]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (20 + 600 + 610, 1 + 5 + 5)
    assert response.usage.requests == 3


def test_a_refused_request_still_fails_the_call(loopback: Any) -> None:
    loopback.reply(
        "/chat/completions", 401, {"error": {"message": "Invalid API key", "type": "authentication_error"}}
    )
    with pytest.raises(ProviderError) as failed:
        client(loopback.url, api="chat_completions", max_concurrency=1).decisions.create(
            input=INPUT, questions=[QUESTIONS[0]]
        )
    assert failed.value.status == 401


def test_the_async_client_answers_alike(server: FaultServer) -> None:
    async def ask() -> Any:
        sdk = AsyncOpenAI(base_url=server.base_url(), api_key="local", max_retries=0)
        async with AsyncSystemOneClient(sdk, model="m", api="chat_completions") as jevper_client:
            return await jevper_client.decisions.create(
                input=INPUT, questions=QUESTIONS, instructions="Be strict."
            )

    asynced = asyncio.run(ask())
    blocking = client(server.base_url(), api="chat_completions").decisions.create(
        input=INPUT, questions=QUESTIONS, instructions="Be strict."
    )
    assert validated(asynced).answers == validated(blocking).answers


def test_the_async_client_keeps_a_refusal_among_the_answers(loopback: Any) -> None:
    loopback.reply(
        "/chat/completions",
        200,
        {
            "choices": [
                {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": ""}}
            ]
        },
    )

    async def ask() -> Any:
        sdk = AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0)
        jevper_client = AsyncSystemOneClient(sdk, model="m", api="chat_completions", method="logprobs")
        return await jevper_client.decisions.create(input=INPUT, questions=[QUESTIONS[0]])

    response = asyncio.run(ask())
    assert [a.type for a in validated(response).answers] == ["refusal"]


# ---- api="decisions": the server's own route -------------------------------------------------------------

NATIVE = {
    "model": "decider-1",
    "answers": [
        {"type": "predicate", "name": "refund", "probability": 0.91},
        {
            "type": "choice",
            "name": "topic",
            "choice": "billing",
            "confidence": 0.85,
            "probabilities": [
                {"value": "billing", "probability": 0.9},
                {"value": "shipping", "probability": 0.05},
                {"value": "technical", "probability": 0.05},
            ],
        },
        {"type": "refusal", "name": None},
        {
            "type": "score",
            "name": "urgency",
            "score": 1.1,
            "confidence": 0.5,
            "probabilities": [
                {"value": 0, "label": "low", "probability": 0.2},
                {"value": 1, "label": "medium", "probability": 0.5},
                {"value": 2, "label": "high", "probability": 0.3},
            ],
        },
    ],
    "usage": {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 120,
    },
}


def test_api_decisions_asks_the_servers_own_route_in_one_request(loopback: Any) -> None:
    loopback.reply("/decisions", 200, NATIVE)
    response = client(loopback.url, api="decisions").decisions.create(
        input=INPUT,
        questions=QUESTIONS,
        instructions="Be strict.",
        prompt_cache_key="tickets",
        safety_identifier="u-1",
    )
    assert response.to_api() == NATIVE
    assert response.usage.cached_tokens == 64
    assert [r.path for r in loopback.requests] == ["/decisions"]
    sent = loopback.bodies("/decisions")[0]
    assert (
        sent["model"] == "m" and sent["prompt_cache_key"] == "tickets" and sent["safety_identifier"] == "u-1"
    )
    assert sent["input"] == [
        {"type": "message", "role": "developer", "content": "Be strict."},
        {"type": "message", "role": "user", "content": INPUT},
    ]
    assert sent["questions"] == QUESTIONS
    assert response.debug["questions"]["questions[0]"]["surface"] == "decisions"


def test_api_decisions_lets_an_image_through_to_the_server(loopback: Any) -> None:
    loopback.reply("/decisions", 200, {**NATIVE, "answers": NATIVE["answers"][:1]})
    given = [
        {
            "role": "user",
            "content": [{"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"}],
        }
    ]
    client(loopback.url, api="decisions").decisions.create(input=given, questions=QUESTIONS[:1])
    assert loopback.bodies("/decisions")[0]["input"][0]["content"][0]["detail"] == "low"


def test_api_decisions_reads_openais_error_envelope_as_a_provider_error_naming_the_param(
    loopback: Any,
) -> None:
    loopback.reply(
        "/decisions",
        400,
        {
            "error": {
                "message": "Label 'medium' is not a single token",
                "type": "invalid_request_error",
                "param": "questions[3].levels",
                "code": "invalid_value",
            }
        },
    )
    with pytest.raises(ProviderError) as refused:
        client(loopback.url, api="decisions").decisions.create(input=INPUT, questions=QUESTIONS)
    assert refused.value.status == 400 and refused.value.param == "questions[3].levels"
    assert refused.value.server_message == "Label 'medium' is not a single token"
    assert str(refused.value).startswith("decisions: ")


def test_api_decisions_refuses_a_body_that_does_not_follow_the_schema(loopback: Any) -> None:
    broken = copy.deepcopy(NATIVE)
    broken["answers"][1]["probabilities"][0]["value"] = "Billing"
    loopback.reply("/decisions", 200, broken)
    with pytest.raises(MalformedAnswerError, match=r"answers\[1\]\.probabilities"):
        client(loopback.url, api="decisions").decisions.create(input=INPUT, questions=QUESTIONS)


def test_api_decisions_takes_no_method() -> None:
    with pytest.raises(InvalidQuestionError, match="OpenAI's Decisions API"):
        client("http://127.0.0.1:9/v1", api="decisions", method="logprobs")


def test_the_async_client_asks_the_servers_own_route(loopback: Any) -> None:
    loopback.reply("/decisions", 200, NATIVE)

    async def ask() -> Any:
        sdk = AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0)
        return await AsyncSystemOneClient(sdk, model="m", api="decisions").decisions.create(
            input=INPUT, questions=QUESTIONS
        )

    assert asyncio.run(ask()).to_api() == NATIVE


# ---- the response's rules --------------------------------------------------------------------------------

WRONG = [
    ("an answer missing", lambda b: b["answers"].pop(), "answers: expected 4 answer(s)"),
    ("a wrong type", lambda b: b["answers"][0].update(type="score"), "answers[0].type"),
    ("a name not the question's", lambda b: b["answers"][0].update(name="other"), "answers[0].name"),
    (
        "a string where a boolean was asked",
        lambda b: b["answers"][2].update(
            type="choice",
            choice="true",
            confidence=0.0,
            probabilities=[{"value": "true", "probability": 0.5}, {"value": False, "probability": 0.5}],
        ),
        "answers[2].probabilities",
    ),
    ("a choice off the peak", lambda b: b["answers"][1].update(choice="shipping"), "answers[1].choice"),
    ("a score off the expectation", lambda b: b["answers"][3].update(score=2.0), "answers[3].score"),
    (
        "probabilities not summing to 1",
        lambda b: b["answers"][3]["probabilities"][0].update(probability=0.5),
        "answers[3].probabilities",
    ),
    (
        "usage without its details",
        lambda b: b["usage"].pop("output_tokens_details"),
        "usage.output_tokens_details",
    ),
]


@pytest.mark.parametrize(("mutate", "named"), [case[1:] for case in WRONG], ids=[case[0] for case in WRONG])
def test_a_response_is_checked_against_the_questions_asked(mutate: Any, named: str) -> None:
    asked = decision_request(body()).body()["questions"]
    assert body_violations(NATIVE, asked) == []
    broken = copy.deepcopy(NATIVE)
    mutate(broken)
    found = body_violations(broken, asked)
    assert found and any(line.startswith(named) for line in found), found


# ---- api="auto": the server's own route, found once --------------------------------------------------------


def test_auto_asks_the_servers_own_route_first_and_keeps_asking_it(loopback: Any) -> None:
    loopback.reply("/decisions", 200, NATIVE)
    loopback.reply("/decisions", 200, NATIVE)
    jevper_client = client(loopback.url)
    first = jevper_client.decisions.create(input=INPUT, questions=QUESTIONS)
    second = jevper_client.decisions.create(input=INPUT, questions=QUESTIONS)
    assert first.to_api() == second.to_api() == NATIVE
    assert [r.path for r in loopback.requests] == ["/decisions", "/decisions"]
    assert first.debug["route"]["surface"] == "decisions"


@pytest.mark.parametrize(
    ("status", "reply"),
    [
        (404, {"error": {"message": "File Not Found", "type": "not_found_error", "code": 404}}),
        (501, {"error": {"message": "This model is not a decision model", "type": "not_supported_error"}}),
        (200, {"model": "m", "answers": {"0": {"type": "noul", "noul": 0.5}}, "usage": {}}),
    ],
    ids=["no route", "not supported", "another shape"],
)
def test_auto_learns_once_that_the_server_has_no_decisions_route_and_asks_its_chat_surface(
    loopback: Any, status: int, reply: dict[str, Any]
) -> None:
    loopback.reply("/decisions", status, reply)
    # A body answered in another shape: SGLang's body and System One's are tried too, each refused here.
    dialects_tried = 2 if status == 200 else 0
    for _ in range(dialects_tried):
        loopback.reply("/decisions", 400, {"error": {"message": "unknown field", "type": "invalid_request"}})
    for _ in range(2):
        loopback.reply("/responses", 404, {"error": {"message": "File Not Found", "type": "not_found_error"}})
    for _ in range(2):
        loopback.reply("/chat/completions", 200, LABEL)
    jevper_client = client(loopback.url, max_concurrency=1)
    first = jevper_client.decisions.create(input=INPUT, questions=[QUESTIONS[0]])
    second = jevper_client.decisions.create(input=INPUT, questions=[QUESTIONS[0]])
    assert (
        [a.type for a in validated(first).answers]
        == [a.type for a in validated(second).answers]
        == ["predicate"]
    )
    assert [r.path for r in loopback.requests] == [
        "/decisions",
        *["/decisions"] * dialects_tried,
        "/responses",
        "/chat/completions",
        "/chat/completions",
    ]
    assert (
        "POST /v1/decisions did not answer in any dialect jevper speaks" in second.debug["route"]["decisions"]
    )
    assert second.debug["route"]["surface"] == "chat_completions"
    assert second.debug["server_limits"] == {}
    # Now known to lack the route: an image is refused before any request.
    image = [{"role": "user", "content": [{"type": "input_image", "image_url": "https://example.com/a.png"}]}]
    with pytest.raises(InvalidDecisionError):
        jevper_client.decisions.create(input=image, questions=[QUESTIONS[0]])
    assert len(loopback.requests) == 4 + dialects_tried


def test_auto_asks_its_own_surfaces_when_the_route_fails_for_now_and_asks_the_route_again_later(
    loopback: Any,
) -> None:
    loopback.reply("/decisions", 503, {"error": {"message": "overloaded", "type": "server_error"}})
    loopback.reply("/responses", 404, {"error": {"message": "File Not Found", "type": "not_found_error"}})
    loopback.reply("/chat/completions", 200, LABEL)
    loopback.reply("/decisions", 200, {**NATIVE, "answers": NATIVE["answers"][:1]})
    jevper_client = client(loopback.url, max_concurrency=1)
    first = jevper_client.decisions.create(input=INPUT, questions=[QUESTIONS[0]])
    assert first.debug["questions"]["questions[0]"]["surface"] != "decisions"
    second = jevper_client.decisions.create(input=INPUT, questions=[QUESTIONS[0]])
    assert second.debug["questions"]["questions[0]"]["surface"] == "decisions"


def test_auto_does_not_ask_the_route_with_a_method_it_cannot_carry(loopback: Any) -> None:
    loopback.reply("/responses", 404, {"error": {"message": "File Not Found", "type": "not_found_error"}})
    loopback.reply("/chat/completions", 200, LABEL)
    client(loopback.url, method="logprobs").decisions.create(input=INPUT, questions=[QUESTIONS[0]])
    assert "/decisions" not in [r.path for r in loopback.requests]


def test_json_nested_32_levels_deep_is_taken() -> None:
    part = {"type": "input_json", "data": nested(32)}
    request = decision_request(body(input=[{"role": "user", "content": [part]}]))
    assert request.input[0]["content"][0] == part


def test_a_calls_model_is_the_one_asked_for(loopback: Any) -> None:
    loopback.reply("/decisions", 200, {**NATIVE, "answers": NATIVE["answers"][:1]})
    client(loopback.url, api="decisions").decisions.create(
        model="other", input=INPUT, questions=QUESTIONS[:1]
    )
    assert loopback.bodies("/decisions")[0]["model"] == "other"
