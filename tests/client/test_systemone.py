"""api="systemone" and the System One half of api="auto", through the real openai and anthropic SDKs
against a loopback server replaying bodies recorded from callo 0.3.1 and llama.cpp b11549
(tests/fixtures/client/systemone, made by tests/fixtures/client/record_systemone.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from typing import Any, ClassVar

import openai
import pytest
from anthropic import Anthropic, AsyncAnthropic
from openai import AsyncOpenAI, OpenAI

from jevper import (
    AsyncSystemOneClient,
    Choice,
    ChoiceAnswer,
    Example,
    InvalidQuestionError,
    MalformedAnswerError,
    Noul,
    NoulAnswer,
    ProviderError,
    ReasoningConfig,
    Score,
    ScoreAnswer,
    SystemOneClient,
    SystemOneResponse,
)
from jevper._native import question_body
from jevper._wire.systemone import body_violations

STATE = "I was charged twice for the same subscription this month."
TOPIC = Choice(
    criteria={"billing": "payments, charges, invoices, refunds", "shipping": None, "technical": "bugs"},
    instructions="What is the message about?",
)
REFUND = Noul(
    "Does the customer want money back?", {"true": "asks for a refund", "false": "asks for nothing"}
)
URGENCY = Score(["not urgent", "somewhat urgent", "very urgent"], instructions="How urgent is this?")
#: The questions of the recorded request, as a caller writes them.
QUESTIONS = {"topic": TOPIC, "refund": REFUND, "urgency": URGENCY}
DECISIONS = {
    "object": "list",
    "data": [
        {
            "id": "laya",
            "object": "model",
            # An output this client does not know is tolerated: only "decisions" counts.
            "architecture": {"input_modalities": ["text"], "output_modalities": ["decisions", "holograms"]},
        }
    ],
}
#: laya-serve 0.2.1 (fake backend), measured 2026-11-30: its validation errors name the field.
LAYA_422 = {
    "error": {
        "message": "List should have at least 2 items after validation, not 1",
        "field": "body.questions.q.score.criteria",
    }
}
#: A FastAPI server's validation error: a list of {loc, msg}.
FASTAPI_422 = {
    "detail": [{"loc": ["body", "questions", "q", "criteria"], "msg": "field required", "type": "missing"}]
}


def sdk(loopback: Any, kind: str = "openai", **settings: Any) -> Any:
    if kind == "anthropic":
        return Anthropic(
            base_url=loopback.url.removesuffix("/v1"), api_key="local", max_retries=0, **settings
        )
    return OpenAI(base_url=loopback.url, api_key="local", max_retries=0, **settings)


def native(loopback: Any, kind: str = "openai", **settings: Any) -> SystemOneClient:
    return SystemOneClient(sdk(loopback, kind), model="smollm2", api="systemone", **settings)


def replay(
    loopback: Any, fixtures: Any, name: str = "callo_valid", path: str = "/systemone"
) -> dict[str, Any]:
    record: dict[str, Any] = fixtures.systemone(name)
    loopback.reply(path, record["status"], record["body"])
    return record


def responses_label() -> dict[str, Any]:
    """A Responses body reading as option A, with a real distribution at the answer token."""
    top = [{"token": t, "logprob": lp} for t, lp in (("A", -0.2), ("B", -1.9), ("C", -3.4))]
    part = {
        "type": "output_text",
        "text": "A",
        "annotations": [],
        "logprobs": [{"token": "A", "logprob": -0.2, "top_logprobs": top}],
    }
    message = {"id": "m", "type": "message", "role": "assistant", "status": "completed", "content": [part]}
    return {
        "id": "r",
        "object": "response",
        "status": "completed",
        "model": "laya",
        "output": [message],
        "usage": {"input_tokens": 9, "output_tokens": 1},
    }


# --- one request for the whole call ---------------------------------------------------------------------


def test_one_post_to_v1_systemone_carries_every_question_in_the_apis_shape(
    loopback: Any, fixtures: Any
) -> None:
    record = replay(loopback, fixtures)
    response = native(loopback).system_one(state=STATE, questions=QUESTIONS)
    assert [(r.method, r.path) for r in loopback.requests] == [("POST", "/systemone")]
    # The same body the recorder sent callo, from the questions as a caller writes them.
    assert loopback.bodies()[0] == record["request"]["body"]
    assert list(response.answers) == ["topic", "refund", "urgency"]


def test_the_anthropic_sdk_reaches_the_same_route_from_its_root_base_url(
    loopback: Any, fixtures: Any
) -> None:
    replay(loopback, fixtures)
    response = native(loopback, "anthropic").system_one(state=STATE, questions=QUESTIONS)
    assert [r.path for r in loopback.requests] == ["/systemone"]  # /v1/systemone on the wire
    assert response.answers["topic"].surface == "systemone"


def test_the_callers_auth_and_headers_travel_with_the_request(loopback: Any, fixtures: Any) -> None:
    replay(loopback, fixtures)
    replay(loopback, fixtures)
    SystemOneClient(
        sdk(loopback, default_headers={"x-team": "billing"}), model="smollm2", api="systemone"
    ).system_one(state=STATE, questions=QUESTIONS)
    SystemOneClient(sdk(loopback, "anthropic"), model="smollm2", api="systemone").system_one(
        state=STATE, questions=QUESTIONS
    )
    by_openai, by_anthropic = (r.headers for r in loopback.requests)
    assert by_openai["authorization"] == "Bearer local" and by_openai["x-team"] == "billing"
    assert "local" in by_anthropic.get("x-api-key", "") + by_anthropic.get("authorization", "")
    assert by_openai["x-stainless-retry-count"] == "0"  # the SDK's own retries are off


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_the_async_client_asks_the_same_one_request(loopback: Any, fixtures: Any, kind: str) -> None:
    replay(loopback, fixtures)
    client: Any = (
        AsyncAnthropic(base_url=loopback.url.removesuffix("/v1"), api_key="local", max_retries=0)
        if kind == "anthropic"
        else AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    )
    asked = AsyncSystemOneClient(client, model="smollm2", api="systemone")
    response = asyncio.run(asked.system_one(state=STATE, questions=QUESTIONS))
    assert [r.path for r in loopback.requests] == ["/systemone"]
    assert response.usage.n_calls == 1 and response.answers["urgency"].surface == "systemone"


def test_answers_say_they_are_native_and_usage_comes_from_the_apis_token_counts(
    loopback: Any, fixtures: Any
) -> None:
    record = replay(loopback, fixtures)
    body = json.loads(record["body"])
    response = native(loopback).system_one(state=STATE, questions=QUESTIONS)
    topic, refund, urgency = (response.answers[k] for k in ("topic", "refund", "urgency"))
    assert (
        isinstance(topic, ChoiceAnswer)
        and isinstance(refund, NoulAnswer)
        and isinstance(urgency, ScoreAnswer)
    )
    assert {(a.method, a.surface) for a in (topic, refund, urgency)} == {("native", "systemone")}
    # The server's own numbers, kept as it sent them.
    assert topic.probabilities == body["answers"]["topic"]["probabilities"]
    assert topic.confidence == body["answers"]["topic"]["confidence"]
    assert refund.noul == body["answers"]["refund"]["noul"]
    assert refund.probabilities == {"yes": refund.noul, "no": 1 - refund.noul}
    assert refund.confidence == pytest.approx(abs(2 * refund.noul - 1))
    assert urgency.legend == {0: "not urgent", 1: "somewhat urgent", 2: "very urgent"}
    assert urgency.probabilities == {
        int(k): v for k, v in body["answers"]["urgency"]["probabilities"].items()
    }
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.n_calls, usage.n_retries) == (
        body["usage"]["input_tokens"],
        0,
        1,
        0,
    )
    assert usage.reasoning_tokens is None and usage.cached_tokens is None and usage.latency > 0
    assert response.model == "smollm2"
    debug = response.debug["questions"]["refund"]
    assert (debug["method"], debug["surface"], debug["requests"]) == ("native", "systemone", 1)
    assert "one System One request carried all 3 question(s)" in debug["why"][0]
    assert "route" not in response.debug  # api was chosen, not found


def test_questions_without_instructions_or_with_text_noul_criteria_go_as_the_prompt_surfaces_ask() -> None:
    # laya-serve 0.2.1 refuses a question without instructions (422 Field required).
    assert question_body(Choice({"a": None, "b": "x"})) == {
        "type": "choice",
        "instructions": "Which option fits the state best?",
        "criteria": {"a": None, "b": "x"},
    }
    assert question_body(Noul("Angry?", criteria="shouting counts")) == {
        "type": "noul",
        "instructions": "Angry?\nCriteria: shouting counts",
    }
    assert question_body(Score([{"x": 1}, "high"], instructions={"task": "rate"})) == {
        "type": "score",
        "instructions": {"task": "rate"},
        "criteria": [{"x": 1}, "high"],
    }


@pytest.mark.parametrize(
    "state", [{"customer": "Ann", "message": "charged twice"}, [{"role": "user", "content": "Hi"}], ["a", 1]]
)
def test_a_state_that_is_not_text_is_sent_as_the_json_value_it_is(
    loopback: Any, fixtures: Any, state: Any
) -> None:
    replay(loopback, fixtures)
    native(loopback).system_one(state=state, questions=QUESTIONS)
    assert loopback.bodies()[0]["state"] == state


def test_extra_body_is_merged_into_the_request_as_given(loopback: Any, fixtures: Any) -> None:
    replay(loopback, fixtures)
    native(loopback, extra_body={"think_budget": 0}).system_one(state=STATE, questions=QUESTIONS)
    assert loopback.bodies()[0]["think_budget"] == 0


# --- what System One cannot carry, refused before sending -----------------------------------------------


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"method": "logprobs"}, "api='systemone' with method='logprobs': expected method='auto'"),
        ({"method": "structured"}, "takes no method"),
        (
            {"examples": [Example(state="x", answers={"topic": "billing"})]},
            "has no field for worked examples",
        ),
        ({"reasoning": ReasoningConfig(effort="low")}, "has no thinking budget"),
    ],
)
def test_what_the_api_cannot_carry_is_refused_naming_why(
    loopback: Any, settings: dict[str, Any], words: str
) -> None:
    with pytest.raises(InvalidQuestionError, match=words):
        native(loopback, **settings)
    client = native(loopback)
    with pytest.raises(InvalidQuestionError, match=words):
        client.system_one(state=STATE, questions=QUESTIONS, **settings)
    assert loopback.requests == []


@pytest.mark.parametrize(
    ("questions", "words"),
    [
        ({}, "expected a non-empty mapping of question id to question"),
        (
            {"q": {"type": "choice", "criteria": {f"o{i}": None for i in range(256)}}},
            "expected 2 to 255 options, got 256",
        ),
        ({"q": {"type": "score", "criteria": ["only"]}}, "expected 2 to 26 levels, got 1"),
        ({"q": {"type": "score", "criteria": [str(i) for i in range(11)]}}, "got 11"),
        (
            {"q": {"type": "noul", "instructions": "x", "criteria": {"yes": "a", "no": "b"}}},
            "'true', 'false' or both",
        ),
        ({"q": {"type": "rank", "criteria": ["a", "b"]}}, "expected 'type' to be one of"),
    ],
)
def test_the_apis_stated_limits_are_checked_before_sending(loopback: Any, questions: Any, words: str) -> None:
    with pytest.raises(InvalidQuestionError, match=words):
        native(loopback).system_one(state=STATE, questions=questions)
    assert loopback.requests == []


class ChatOnly:
    """A duck-typed client with chat.completions.create and nothing generic."""

    def __init__(self) -> None:
        self.chat = self
        self.completions = self

    def create(self, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("System One must not fall back to chat")


def test_a_client_without_a_generic_post_is_a_provider_error_naming_what_it_lacks() -> None:
    with pytest.raises(ProviderError, match=r"expected the client to have a generic post\(\)") as refused:
        SystemOneClient(ChatOnly(), model="m", api="systemone").system_one(state=STATE, questions=QUESTIONS)
    assert (refused.value.kind, refused.value.status) == ("missing_route", None)


# --- refusals, in the server's own words ----------------------------------------------------------------


def test_a_404_is_a_missing_route_naming_the_surfaces_that_would_answer(loopback: Any, fixtures: Any) -> None:
    record = fixtures.recorded("unknown_path")  # llama.cpp's 404 for a route it does not have
    loopback.reply("/systemone", record["status"], record["body"])
    with pytest.raises(ProviderError, match="no System One route") as refused:
        native(loopback).system_one(state=STATE, questions=QUESTIONS)
    assert (refused.value.status, refused.value.kind, refused.value.server_message) == (
        404,
        "missing_route",
        "File Not Found",
    )


def test_llamacpps_501_names_the_model_and_the_surfaces_that_would_answer_it(
    loopback: Any, fixtures: Any
) -> None:
    replay(loopback, fixtures, "llamacpp_not_a_decision_model")
    with pytest.raises(ProviderError) as refused:
        native(loopback).system_one(state=STATE, questions=QUESTIONS)
    error = refused.value
    assert (error.status, error.kind, error.server_message) == (
        501,
        "not_supported",
        "This model is not a decision model",
    )
    assert "'smollm2' is not a decision model here" in str(error)
    assert all(surface in str(error) for surface in ("chat_completions", "responses", "messages"))


@pytest.mark.parametrize(
    ("body", "said", "field"),
    [
        ("callo_empty_questions", "at least one question is required", None),
        ("callo_unknown_type", "q: type must be one of ('noul', 'choice', 'score')", None),
        (
            LAYA_422,
            "List should have at least 2 items after validation, not 1",
            "body.questions.q.score.criteria",
        ),
        (FASTAPI_422, "body.questions.q.criteria: field required", None),
        (
            {"detail": "request must be an object with a state"},
            "request must be an object with a state",
            None,
        ),
    ],
)
def test_a_422_carries_the_servers_own_words_whatever_their_shape(
    loopback: Any, fixtures: Any, body: Any, said: str, field: str | None
) -> None:
    if isinstance(body, str):
        replay(loopback, fixtures, body)
    else:
        loopback.reply("/systemone", 422, body)
    with pytest.raises(ProviderError) as refused:
        native(loopback).system_one(state=STATE, questions=QUESTIONS)
    assert (refused.value.status, refused.value.server_message, refused.value.field) == (422, said, field)
    assert repr(said) in str(refused.value)
    assert len(loopback.requests) == 1


def test_a_400_carries_llamacpps_words(loopback: Any) -> None:
    loopback.reply(
        "/systemone",
        400,
        {"error": {"code": 400, "message": "state: expected a string", "type": "invalid_request_error"}},
    )
    with pytest.raises(ProviderError, match="state: expected a string") as refused:
        native(loopback).system_one(state=STATE, questions=QUESTIONS)
    assert refused.value.status == 400


@pytest.mark.parametrize("status", [400, 404, 422, 501])
def test_a_refusal_is_never_retried_and_a_busy_server_is(loopback: Any, fixtures: Any, status: int) -> None:
    loopback.reply("/systemone", status, {"error": {"message": "no"}})
    retrying = SystemOneClient(
        OpenAI(base_url=loopback.url, api_key="local", max_retries=2), model="m", api="systemone"
    )
    with pytest.raises(ProviderError):
        retrying.system_one(state=STATE, questions=QUESTIONS)
    assert len(loopback.requests) == 1
    loopback.reply("/systemone", 503, {"error": {"message": "Loading model"}}, headers=[("retry-after", "0")])
    replay(loopback, fixtures)
    assert retrying.system_one(state=STATE, questions=QUESTIONS).usage.n_calls == 1
    assert len(loopback.requests) == 3


# --- the response, validated ----------------------------------------------------------------------------


def broken(fixtures: Any, change: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(fixtures.systemone("callo_valid")["body"])
    change(body)
    return body


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda b: b["answers"].pop("refund"),
            "expected an answer to every question, got none for ['refund']",
        ),
        (lambda b: b["answers"]["topic"].update(type="score"), "answers['topic'].type: expected 'choice'"),
        (lambda b: b["answers"]["topic"]["probabilities"].pop("shipping"), "expected exactly the keys"),
        (lambda b: b["answers"]["topic"]["probabilities"].update(billing=0.9), "expected a sum of 1"),
        (
            lambda b: b["answers"]["topic"].update(choice="technical"),
            "expected the most probable option 'billing'",
        ),
        (lambda b: b["answers"]["urgency"].update(score=2.0), "score: expected the expected level index"),
        (lambda b: b["answers"]["urgency"]["legend"].update({"2": "urgent"}), "legend: expected"),
        (lambda b: b["answers"]["urgency"].update(confidence=1.5), "confidence: expected a number in [0, 1]"),
        (lambda b: b["answers"]["refund"].update(noul=None), "noul: expected a number in [0, 1], got null"),
        (lambda b: b.pop("usage"), "usage: expected an object"),
        (
            lambda b: b["answers"].update(extra={"type": "noul", "noul": 0.5}),
            "expected only the questions asked",
        ),
    ],
)
def test_an_answer_that_does_not_follow_the_api_is_malformed_and_says_what(
    loopback: Any, fixtures: Any, change: Any, words: str
) -> None:
    loopback.reply("/systemone", 200, broken(fixtures, change))
    with pytest.raises(MalformedAnswerError) as refused:
        native(loopback).system_one(state=STATE, questions=QUESTIONS)
    assert words in str(refused.value)


def test_a_200_carrying_an_error_is_a_provider_error(loopback: Any) -> None:
    loopback.reply(
        "/systemone", 200, {"error": {"message": "upstream unreachable", "type": "callo_upstream"}}
    )
    with pytest.raises(ProviderError, match="upstream unreachable") as refused:
        native(loopback).system_one(state=STATE, questions=QUESTIONS)
    assert refused.value.status == 200


def test_laya_serves_a_uniform_answer_whose_peak_is_any_option_and_it_reads(loopback: Any) -> None:
    # laya-serve 0.2.1's fake backend: every option 1/3, choice "billing", confidence 0.0.
    third = 1 / 3
    body = {
        "model": "laya-english",
        "answers": {
            "q": {
                "type": "choice",
                "choice": "billing",
                "probabilities": dict.fromkeys(TOPIC.options, third),
                "confidence": 0.0,
            }
        },
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    loopback.reply("/systemone", 200, body)
    response = native(loopback).system_one(state=STATE, questions={"q": TOPIC})
    assert response.answers["q"].confidence == 0.0 and response.model == "laya-english"


# --- the API's shape back out ---------------------------------------------------------------------------


def test_to_api_round_trips_a_recorded_callo_body_exactly(loopback: Any, fixtures: Any) -> None:
    record = replay(loopback, fixtures)
    response = native(loopback).system_one(state=STATE, questions=QUESTIONS)
    assert response.to_api() == json.loads(record["body"])


def test_to_api_of_emulated_answers_is_a_valid_system_one_body(loopback: Any) -> None:
    chat = {
        "object": "chat.completion",
        "model": "smollm2",
        "usage": {"prompt_tokens": 11, "completion_tokens": 4},
    }
    for text in (
        '{"billing": 0.5, "shipping": 0.2, "technical": 0.3}',
        '{"noul": 0.25}',
        '{"0": 0.1, "1": 0.6, "2": 0.3}',
    ):
        message = {"role": "assistant", "content": text}
        loopback.reply(
            "/chat/completions",
            200,
            {**chat, "choices": [{"index": 0, "finish_reason": "stop", "message": message}]},
        )
    emulated = SystemOneClient(
        sdk(loopback), model="smollm2", api="chat_completions", method="structured", max_concurrency=1
    )
    body = emulated.system_one(state=STATE, questions=QUESTIONS).to_api()
    asked = {qid: question_body(q) for qid, q in QUESTIONS.items()}
    assert body_violations(body, asked) == []
    assert body["usage"] == {"input_tokens": 33, "output_tokens": 12} and body["model"] == "smollm2"
    assert body["answers"]["urgency"]["legend"] == {
        "0": "not urgent",
        "1": "somewhat urgent",
        "2": "very urgent",
    }


def test_to_api_keeps_a_distribution_when_the_answer_holds_a_models_own_numbers() -> None:
    from jevper import Usage

    answer = ChoiceAnswer("a", {"a": 0.6, "b": 0.2}, 0.5, "structured", "chat_completions")  # not rescaled
    body = SystemOneResponse({"q": answer}, Usage(), model="m").to_api()
    assert body["answers"]["q"]["probabilities"] == pytest.approx({"a": 0.75, "b": 0.25})
    assert body["usage"] == {"input_tokens": None, "output_tokens": None}
    assert body_violations(body, {"q": {"type": "choice", "criteria": {"a": None, "b": None}}}) == []


def test_native_and_emulated_answers_to_the_same_question_have_the_same_fields(
    loopback: Any, fixtures: Any
) -> None:
    replay(loopback, fixtures)
    chat = {"object": "chat.completion", "model": "smollm2"}
    for text in (
        '{"billing": 0.5, "shipping": 0.2, "technical": 0.3}',
        '{"noul": 0.25}',
        '{"0": 0.1, "1": 0.6, "2": 0.3}',
    ):
        message = {"role": "assistant", "content": text}
        loopback.reply(
            "/chat/completions",
            200,
            {**chat, "choices": [{"index": 0, "finish_reason": "stop", "message": message}]},
        )
    by_api = native(loopback).system_one(state=STATE, questions=QUESTIONS)
    emulated = SystemOneClient(
        sdk(loopback), model="smollm2", api="chat_completions", method="structured", max_concurrency=1
    )
    by_prompt = emulated.system_one(state=STATE, questions=QUESTIONS)
    for qid in QUESTIONS:
        one, other = by_api.answers[qid], by_prompt.answers[qid]
        assert type(one) is type(other)
        assert [f.name for f in dataclasses.fields(one)] == [f.name for f in dataclasses.fields(other)]
        assert list(one.probabilities) == list(other.probabilities)  # type: ignore[arg-type]
        assert one.type == other.type and one.to_api().keys() == other.to_api().keys()
    assert by_api.answers["urgency"].legend == by_prompt.answers["urgency"].legend  # type: ignore[union-attr]


# --- api="auto" -----------------------------------------------------------------------------------------


def auto(loopback: Any, model: str = "laya", **settings: Any) -> SystemOneClient:
    return SystemOneClient(sdk(loopback), model=model, **settings)


def test_auto_asks_system_one_for_a_model_the_server_lists_as_a_decision_model_and_remembers(
    loopback: Any, fixtures: Any
) -> None:
    loopback.model_list(200, DECISIONS)
    replay(loopback, fixtures)
    replay(loopback, fixtures)
    asked = auto(loopback)
    first = asked.system_one(state=STATE, questions=QUESTIONS)
    second = asked.system_one(state=STATE, questions=QUESTIONS)
    assert [r.path for r in loopback.listed] == ["/models"]  # once per model
    assert [r.path for r in loopback.requests] == ["/systemone", "/systemone"]
    assert first.debug["route"]["surface"] == second.debug["route"]["surface"] == "systemone"
    assert (
        "with output_modalities ['decisions', 'holograms']: a decision model" in first.debug["route"]["why"]
    )
    assert first.answers["topic"].method == "native"


def test_auto_keeps_a_model_listed_as_text_on_the_prompt_surfaces_and_says_why(
    loopback: Any, fixtures: Any
) -> None:
    models = fixtures.systemone("callo_models")  # llama.cpp's list, proxied by callo: ["text"]
    loopback.model_list(models["status"], models["body"])
    loopback.reply("/responses", 200, responses_label())
    response = auto(loopback, "smollm2").system_one(state=STATE, questions={"topic": TOPIC})
    assert [r.path for r in loopback.requests] == ["/responses"]
    route = response.debug["route"]
    assert route["surface"] == "responses" and route["why"] == "preferred surface"
    assert (
        route["discovery"]
        == "GET /models lists 'smollm2' with output_modalities ['text']: not a decision model"
    )


def test_auto_on_a_server_that_predates_decision_models_carries_on_as_before(loopback: Any) -> None:
    # The fault server's own list names one model and no architecture, as servers before b11361 do.
    loopback.reply("/responses", 200, responses_label())
    response = auto(loopback, "fault-model").system_one(state=STATE, questions={"topic": TOPIC})
    assert "without an architecture" in response.debug["route"]["discovery"]
    assert response.answers["topic"].surface == "responses"


@pytest.mark.parametrize(
    ("status", "body", "words"),
    [
        (
            404,
            {"error": {"message": "File Not Found", "type": "not_found_error", "code": 404}},
            "GET /models failed",
        ),
        (200, "this is not JSON", "GET /models failed"),
        (200, {"object": "list"}, "without a 'data' list"),
        (
            200,
            {"data": [{"id": "other", "architecture": {"output_modalities": ["decisions"]}}]},
            "does not list 'laya'",
        ),
    ],
)
def test_a_model_list_that_fails_or_says_nothing_means_not_a_decision_model_remembered_with_why(
    loopback: Any, status: int, body: Any, words: str
) -> None:
    loopback.model_list(status, body)
    loopback.reply("/responses", 200, responses_label())
    loopback.reply("/responses", 200, responses_label())
    asked = auto(loopback)
    first = asked.system_one(state=STATE, questions={"topic": TOPIC})
    asked.system_one(state=STATE, questions={"topic": TOPIC})
    assert words in first.debug["route"]["discovery"]
    assert [r.path for r in loopback.requests] == ["/responses", "/responses"]
    assert len(loopback.listed) == 1


class TimingOut(openai.OpenAI):
    """The real SDK, whose model list never comes."""

    asked: ClassVar[list[str]] = []  # shared with the copy jevper makes with the SDK's retries off

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.asked.append(str(args[0] if args else kwargs.get("path")))
        # A real request, as the SDK's own transport would name: the SDK reads its headers.
        raise openai.APITimeoutError(request=self._client.build_request("GET", f"{self.base_url}models"))


def test_a_model_list_that_times_out_sends_this_call_to_the_prompt_surfaces_and_the_next_asks_again(
    loopback: Any,
) -> None:
    loopback.reply("/responses", 200, responses_label())
    loopback.reply("/responses", 200, responses_label())
    client = TimingOut(base_url=loopback.url, api_key="local", max_retries=0)
    TimingOut.asked.clear()
    asked = SystemOneClient(client, model="laya")
    response = asked.system_one(state=STATE, questions={"topic": TOPIC})
    discovery = response.debug["route"]["discovery"]
    assert "GET /models failed, so not asked through System One this time" in discovery
    assert "timeout" in discovery
    asked.system_one(state=STATE, questions={"topic": TOPIC})
    assert len(TimingOut.asked) == 2  # nothing was settled, so the second call asked again


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_a_model_list_that_fails_for_now_is_asked_again_and_only_its_answer_is_remembered(
    loopback: Any, fixtures: Any, status: int
) -> None:
    loopback.model_list(status, {"error": {"message": "the server is loading the model"}})
    loopback.reply("/responses", 200, responses_label())
    replay(loopback, fixtures)
    replay(loopback, fixtures)
    asked = auto(loopback)
    first = asked.system_one(state=STATE, questions={"topic": TOPIC})
    assert (
        "GET /models failed, so not asked through System One this time" in first.debug["route"]["discovery"]
    )
    assert first.answers["topic"].surface == "responses"
    loopback.model_list(200, DECISIONS)
    second = asked.system_one(state=STATE, questions=QUESTIONS)
    third = asked.system_one(state=STATE, questions=QUESTIONS)
    # Asked again on the second call; its answer settles the model, so the third asks nothing.
    assert len(loopback.listed) == 2
    assert second.answers["topic"].method == third.answers["topic"].method == "native"
    assert "a decision model" in third.debug["route"]["why"]


def test_concurrent_first_calls_share_one_failed_model_list(loopback: Any) -> None:
    loopback.model_list(503, {"error": {"message": "the server is loading the model"}})
    loopback.delay = 0.2  # the calls overlap while the model list is asked
    for _ in range(3):
        loopback.reply("/responses", 200, responses_label())
    client = AsyncSystemOneClient(
        AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0), model="laya"
    )

    async def three() -> list[SystemOneResponse]:
        return list(
            await asyncio.gather(
                *(client.system_one(state=STATE, questions={"topic": TOPIC}) for _ in range(3))
            )
        )

    responses = asyncio.run(three())
    assert len(loopback.listed) == 1
    assert all(r.answers["topic"].surface == "responses" for r in responses)


def test_a_501_under_auto_moves_the_model_to_the_prompt_surfaces_answers_and_remembers(
    loopback: Any, fixtures: Any
) -> None:
    loopback.model_list(200, DECISIONS)
    replay(loopback, fixtures, "llamacpp_not_a_decision_model")
    loopback.reply("/responses", 200, responses_label())
    loopback.reply("/responses", 200, responses_label())
    asked = auto(loopback)
    first = asked.system_one(state=STATE, questions={"topic": TOPIC})
    asked.system_one(state=STATE, questions={"topic": TOPIC})
    assert [r.path for r in loopback.requests] == ["/systemone", "/responses", "/responses"]
    assert first.answers["topic"].surface == "responses"
    assert (
        "but POST /systemone answered 501 'This model is not a decision model'"
        in first.debug["route"]["discovery"]
    )


def test_auto_with_an_explicit_method_never_asks_the_model_list(loopback: Any) -> None:
    loopback.model_list(200, DECISIONS)
    loopback.reply("/responses", 200, responses_label())
    response = auto(loopback, method="logprobs").system_one(state=STATE, questions={"topic": TOPIC})
    assert loopback.listed == [] and response.answers["topic"].method == "logprobs"
    assert "discovery" not in response.debug["route"]


def test_auto_refuses_examples_for_a_decision_model_naming_why(loopback: Any) -> None:
    loopback.model_list(200, DECISIONS)
    with pytest.raises(
        InvalidQuestionError, match=r"api='auto' answers 'laya' through System One .* example"
    ):
        auto(loopback, examples=[Example(state="x", answers={"topic": "billing"})]).system_one(
            state=STATE, questions={"topic": TOPIC}
        )
    assert loopback.requests == []


def test_threads_making_their_first_call_at_once_ask_the_model_list_once(
    loopback: Any, fixtures: Any
) -> None:
    loopback.model_list(200, DECISIONS)
    for _ in range(4):
        replay(loopback, fixtures)
    asked = auto(loopback)
    threads = [
        threading.Thread(target=asked.system_one, kwargs={"state": STATE, "questions": QUESTIONS})
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(loopback.listed) == 1 and len(loopback.requests) == 4


def test_concurrent_async_calls_ask_the_model_list_once(loopback: Any, fixtures: Any) -> None:
    loopback.model_list(200, DECISIONS)
    for _ in range(3):
        replay(loopback, fixtures)
    asked = AsyncSystemOneClient(
        AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0), model="laya"
    )

    async def three() -> list[SystemOneResponse]:
        return list(
            await asyncio.gather(*(asked.system_one(state=STATE, questions=QUESTIONS) for _ in range(3)))
        )

    responses = asyncio.run(three())
    assert len(loopback.listed) == 1
    assert {r.debug["route"]["surface"] for r in responses} == {"systemone"}


# --- the conformance rules, one answer at a time (the probe harness reuses them) --------------------------


def test_violations_is_empty_for_every_recorded_answer_and_names_each_rule_broken(fixtures: Any) -> None:
    from jevper._wire.systemone import violations

    body = json.loads(fixtures.systemone("callo_valid")["body"])
    asked = {qid: question_body(q) for qid, q in QUESTIONS.items()}
    assert all(violations(body["answers"][qid], asked[qid]) == [] for qid in asked)
    wrong = {
        "type": "score",
        "score": 1.0,
        "legend": {"0": "not urgent"},
        "probabilities": {"0": 0.5, "1": 0.6},
    }
    assert violations(wrong, asked["urgency"]) == [
        "probabilities: expected exactly the keys ['0', '1', '2'], missing ['2'], extra []",
        "legend: expected {'0': 'not urgent', '1': 'somewhat urgent', '2': 'very urgent'}, "
        "got {'0': 'not urgent'}",
        "confidence: expected a number in [0, 1], got null",
    ]
    assert violations(["not", "an", "object"], asked["topic"]) == ["answer: expected an object, got a list"]
    # A noul carries no confidence in the API; a server adding fields of its own breaks no rule.
    assert violations({"type": "noul", "noul": 0.4, "confidence": 0.2}, asked["refund"]) == []


def test_a_model_is_found_in_the_list_by_its_id_or_one_of_its_aliases() -> None:
    from jevper._wire.model_list import decision_model

    listed = {
        "data": [
            {
                "id": "/models/laya.gguf",
                "aliases": ["laya"],
                "architecture": {"output_modalities": ["decisions"]},
            }
        ]
    }
    assert decision_model(listed, "laya").decisions
    assert decision_model(listed, "/models/laya.gguf").decisions
    odd = {"data": [{"id": "laya", "architecture": {"output_modalities": "decisions"}}]}
    assert (
        decision_model(odd, "laya").why == "GET /models lists 'laya' without architecture.output_modalities"
    )
