"""The client against the embedded llama.cpp, recorded once and replayed offline.

Recorded with: .venv/bin/python -m pytest tests/client/test_embedded_recorded.py --record-mode=once
(starts the embedded server; provenance in tests/fixtures/client/cassettes/PROVENANCE.md). Replay needs
no server: the cassettes answer every request, matched on method, path and body.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from jevper import (
    Choice,
    ChoiceAnswer,
    LabelReadoutError,
    Noul,
    NoulAnswer,
    Score,
    ScoreAnswer,
    SystemOneClient,
)

STATE = "I was charged twice for the same subscription this month."
INTENT = Choice(
    criteria={
        "billing": "money, invoices, refunds, charges",
        "technical": "errors, crashes, login or performance problems",
        "sales": "pricing, plans, purchasing, upgrades",
    }
)
URGENT = Noul("Is the customer asking for something urgent?")
ANGER = Score(["calm", "annoyed", "angry"])
# Greedy decoding, so a recording says what the model does rather than what one sample did; a bounded
# output, because a 135M model left alone can ramble until its context is full.
DETERMINISTIC = {"temperature": 0, "max_tokens": 64}
WIDE = {f"option {i:02d}": f"the case numbered {i}" for i in range(27)}


@pytest.fixture(scope="module")
def embedded(request: pytest.FixtureRequest) -> str:
    """The embedded server's base_url when recording; any loopback address when replaying."""
    if request.config.getoption("--record-mode") in (None, "none"):
        return "http://127.0.0.1:9/v1"
    server = request.getfixturevalue("llamacpp")
    return str(server.base_url)


def client(base_url: str, **settings: Any) -> SystemOneClient:
    extra = {**DETERMINISTIC, **settings.pop("extra_body", {})}
    return SystemOneClient(
        OpenAI(base_url=base_url, api_key="local", max_retries=0),
        model="smollm2",
        extra_body=extra,
        **settings,
    )


def assert_valid(answer: object, options: tuple[str, ...]) -> None:
    probabilities: dict[Any, float] = getattr(answer, "probabilities")  # noqa: B009
    keys = tuple(str(k) for k in probabilities)
    assert keys == options
    assert math.isclose(sum(probabilities.values()), 1.0, abs_tol=1e-9)
    assert all(0.0 <= p <= 1.0 for p in probabilities.values())
    if isinstance(answer, NoulAnswer):
        assert 0.0 <= answer.noul <= 1.0
    if isinstance(answer, ScoreAnswer):
        assert 0.0 <= answer.score <= len(options) - 1


@pytest.mark.vcr
@pytest.mark.parametrize("method", ["logprobs", "grammar", "structured", "discrete", "auto"])
def test_every_method_answers_a_choice_from_the_embedded_server(embedded: str, method: str) -> None:
    response = client(embedded, method=method, api="chat_completions").system_one(
        state=STATE, questions={"intent": INTENT}
    )
    answer = response.answers["intent"]
    assert isinstance(answer, ChoiceAnswer)
    assert_valid(answer, INTENT.options)
    # auto sends the label grammar from its first request: the reading is grammar-constrained.
    assert answer.method == ("grammar" if method == "auto" else method)
    assert response.usage.n_calls == 1 or method in ("structured", "discrete")
    assert response.usage.n_calls >= 1 and response.usage.input_tokens


@pytest.mark.vcr
def test_noul_and_score_answer_via_grammar_from_the_embedded_server(embedded: str) -> None:
    response = client(embedded, method="grammar", api="chat_completions").system_one(
        state=STATE, questions={"urgent": URGENT, "anger": ANGER}
    )
    assert list(response.answers) == ["urgent", "anger"]
    assert_valid(response.answers["urgent"], ("yes", "no"))
    assert_valid(response.answers["anger"], ("0", "1", "2"))


@pytest.mark.vcr
def test_a_prose_first_token_raises_label_readout_error_after_exactly_one_retry(
    embedded: str, vcr: Any
) -> None:
    asked = client(embedded, method="logprobs", api="chat_completions")
    with pytest.raises(LabelReadoutError, match="after one corrective retry") as caught:
        asked.system_one(state="What is the capital of France?", questions={"urgent": URGENT})
    assert "got 'The'" in str(caught.value)
    first, second = (json.loads(r.body) for r in vcr.requests)
    assert len(vcr.requests) == 2
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert second["messages"][-2]["role"] == "assistant"
    assert second["messages"][-1]["content"].startswith("Your reply must be exactly one of the letters A, B")
    assert "grammar" not in second  # method="logprobs" never forces the label


@pytest.mark.vcr
def test_auto_moves_the_label_readout_off_a_responses_route_that_refuses_logprobs(
    embedded: str, vcr: Any
) -> None:
    response = client(embedded).system_one(state=STATE, questions={"intent": INTENT})
    answer = response.answers["intent"]
    assert isinstance(answer, ChoiceAnswer)
    assert (answer.method, answer.surface) == ("grammar", "chat_completions")
    assert_valid(answer, INTENT.options)
    # api="auto" asks GET /v1/models first (llama.cpp lists SmolLM2 with output_modalities ["text"]).
    assert [r.path for r in vcr.requests if r.method == "POST"] == ["/v1/responses", "/v1/chat/completions"]
    why = response.debug["questions"]["intent"]["why"]
    assert any("top_logprobs requires logprobs to be set to true" in w for w in why)
    assert "top_logprobs requires logprobs" in response.debug["route"]["why"]


@pytest.mark.vcr
def test_twenty_six_options_are_read_by_label_and_twenty_seven_in_rounds_of_label_readouts(
    embedded: str, vcr: Any
) -> None:
    widest = Choice(criteria=dict(list(WIDE.items())[:26]))
    response = client(embedded, method="grammar", api="chat_completions").system_one(
        state="This is case number 3.", questions={"case": widest}
    )
    assert_valid(response.answers["case"], widest.options)
    wider = client(embedded, method="logprobs", api="chat_completions").system_one(
        state="This is case number 3.", questions={"case": Choice(criteria=WIDE)}
    )
    answer = wider.answers["case"]
    assert_valid(answer, tuple(WIDE))
    assert answer.method == "logprobs" and len(set(answer.probabilities.values())) > 2
    # Two groups (14 and 13 options), then their two winners: three readouts, none of them in JSON.
    assert response.usage.n_calls == 1
    sent = [json.loads(r.body) for r in vcr.requests[1:]]
    assert wider.usage.n_calls == len(sent) == 3
    assert all(body["logprobs"] and "response_format" not in body for body in sent)


@pytest.mark.vcr
def test_auto_reads_twenty_seven_options_in_rounds_of_grammar_constrained_label_readouts(
    embedded: str, vcr: Any
) -> None:
    asked = client(embedded, api="chat_completions")
    response = asked.system_one(state="This is case number 3.", questions={"case": Choice(criteria=WIDE)})
    answer = response.answers["case"]
    assert (answer.method, answer.surface) == ("grammar", "chat_completions")
    assert_valid(answer, tuple(WIDE))
    why = response.debug["questions"]["case"]["why"]
    assert why[0] == "27 options exceed the 26 labels: answered in rounds of readouts"
    sent = [json.loads(r.body) for r in vcr.requests]
    assert len(sent) == 3 and all(body["grammar"].startswith('root ::= "A" | "B"') for body in sent)


@pytest.mark.vcr
def test_messages_through_the_anthropic_sdk_resolve_auto_to_structured_then_to_one_option(
    embedded: str, vcr: Any
) -> None:
    jevper = SystemOneClient(
        Anthropic(base_url=embedded.removesuffix("/v1"), api_key="local", max_retries=0),
        model="smollm2",
        api="messages",
        extra_body={"temperature": 0},
    )
    state = [
        {"role": "system", "content": "The customer is on the premium plan."},
        {"role": "user", "content": STATE},
    ]
    response = jevper.system_one(state=state, questions={"intent": INTENT})
    sent = json.loads(vcr.requests[0].body)
    assert vcr.requests[0].path == "/v1/messages"
    assert sent["max_tokens"] == 70  # sized to the answer's object (1024 without a prefill)
    assert sent["system"].endswith("The customer is on the premium plan.")
    # The answer's opening goes last, as an assistant turn the model continues (no thinking asked).
    assert [m["role"] for m in sent["messages"]] == ["user", "user", "assistant"]
    assert sent["messages"][-1]["content"] == '{"billing":'
    schema = sent["output_config"]["format"]["schema"]
    assert '"minimum":' not in json.dumps(schema) and "(minimum 0, maximum 1)" in json.dumps(schema)
    assert '"billing": null' in sent["messages"][0]["content"]  # the schema is kept in the prompt too
    # A line that closes an object ends the reply: the server stops there, not at the output budget.
    assert sent["stop_sequences"] == ["}\n"]
    # llama.cpp ignores output_config, and SmolLM2 copies the schema out of the prompt in place of the
    # numbers until the answer-sized budget runs out; auto then asks for one option, which the prefill
    # turns into a one-word continuation (the object the reply opens with is the answer).
    answer = response.answers["intent"]
    assert isinstance(answer, ChoiceAnswer)
    assert answer.method == "discrete"
    assert_valid(answer, INTENT.options)
    debug = response.debug["questions"]["intent"]
    assert debug["why"][0] == "messages carries no logprobs: answered with structured"
    assert "ran past the output budget ('max_tokens')): answered with discrete" in debug["why"][1]
    assert len(vcr.requests) == 2
    replies = [json.loads(r["body"]["string"]) for r in vcr.responses]
    # No reply ran long: b11549 wrote on to the 1024-token budget before (70 s a call).
    first, second = (r["usage"]["output_tokens"] for r in replies)
    assert first == 70 and second < 45
    fallback = json.loads(vcr.requests[1].body)
    assert fallback["stop_sequences"] == ["}\n"] and fallback["max_tokens"] == 45
    assert fallback["messages"][-1]["content"] == '{"choice": "'
    assert fallback["output_config"]["format"]["schema"]["properties"]["choice"]["enum"] == list(
        INTENT.options
    )
