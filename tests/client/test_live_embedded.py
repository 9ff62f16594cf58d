"""Live (marker `live`): every method on every question type, from the blocking and the async client,
and how `auto` fares with a weak instruction follower.

The server is the one `--live` names (the embedded llama.cpp by default, or vLLM); what only llama.cpp
does — the GBNF `grammar` field, its Responses route refusing the logprob fields — is asked of the
embedded llama.cpp whichever server `--live` names.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from jevper import (
    AsyncSystemOneClient,
    Choice,
    JevperError,
    LabelReadoutError,
    MalformedAnswerError,
    Noul,
    Score,
    SystemOneClient,
)
from jevper.servers import SpawnedServer

pytestmark = pytest.mark.live

STATE = "I was charged twice for the same subscription this month."
QUESTIONS: dict[str, Choice | Noul | Score] = {
    "intent": Choice(
        criteria={
            "billing": "money, invoices, refunds, charges",
            "technical": "errors, crashes, login or performance problems",
            "sales": "pricing, plans, purchasing, upgrades",
        }
    ),
    "urgent": Noul("Is the customer asking for something urgent?"),
    "anger": Score(["calm", "annoyed", "angry"]),
}
GREEDY = {"temperature": 0, "max_tokens": 64}
# SmolLM2-135M fills the JSON for these with numbers that are no distribution (2.0 for a probability,
# all zeros); jevper must then raise after its one retry, never answer.
MODEL_CANNOT = {("structured", "urgent"), ("structured", "anger")}


def server_for(method: str, request: pytest.FixtureRequest) -> SpawnedServer:
    """The `--live` server, or llama.cpp for `grammar`: the one server that takes the field."""
    name = "llamacpp" if method == "grammar" else "live_server"
    chosen: SpawnedServer = request.getfixturevalue(name)
    return chosen


def outcome(call: Any) -> Any:
    try:
        response = call()
    except JevperError as error:
        return error
    return response


def assert_valid(answer: Any, question: Choice | Noul | Score) -> None:
    keys = tuple(str(k) for k in answer.probabilities)
    assert keys == question.options
    assert math.isclose(sum(answer.probabilities.values()), 1.0, abs_tol=1e-9)
    if isinstance(question, Noul):
        assert 0.0 <= answer.noul <= 1.0
    if isinstance(question, Score):
        assert 0.0 <= answer.score <= len(question.criteria) - 1


@pytest.mark.parametrize("method", ["logprobs", "grammar", "structured", "discrete", "auto"])
@pytest.mark.parametrize("qid", list(QUESTIONS))
def test_every_method_on_every_question_type_answers_alike_from_both_clients(
    request: pytest.FixtureRequest, method: str, qid: str
) -> None:
    server = server_for(method, request)
    question = {qid: QUESTIONS[qid]}
    blocking = SystemOneClient(
        OpenAI(base_url=server.base_url, api_key="local", max_retries=0),
        model=server.model,
        method=method,
        api="chat_completions",
        extra_body=GREEDY,
    )
    concurrent = AsyncSystemOneClient(
        AsyncOpenAI(base_url=server.base_url, api_key="local", max_retries=0),
        model=server.model,
        method=method,
        api="chat_completions",
        extra_body=GREEDY,
    )
    sync = outcome(lambda: blocking.system_one(state=STATE, questions=question))
    async_ = outcome(lambda: asyncio.run(concurrent.system_one(state=STATE, questions=question)))
    if (method, qid) in MODEL_CANNOT:
        assert isinstance(sync, MalformedAnswerError) or hasattr(sync, "answers")
        assert type(sync) is type(async_)
        if hasattr(sync, "answers"):
            assert_valid(sync.answers[qid], QUESTIONS[qid])
        else:
            assert "after one corrective retry" in str(sync)
        return
    assert not isinstance(sync, Exception), sync
    assert not isinstance(async_, Exception), async_
    assert_valid(sync.answers[qid], QUESTIONS[qid])
    assert_valid(async_.answers[qid], QUESTIONS[qid])
    a, b = sync.answers[qid], async_.answers[qid]
    assert (a.method, a.surface) == (b.method, b.surface)
    assert a.probabilities == pytest.approx(b.probabilities, abs=0.02)


def test_a_whole_rubric_runs_concurrently_and_comes_back_in_insertion_order(llamacpp: SpawnedServer) -> None:
    server = llamacpp  # asked with grammar
    concurrent = AsyncSystemOneClient(
        AsyncOpenAI(base_url=server.base_url, api_key="local", max_retries=0),
        model=server.model,
        method="grammar",
        api="chat_completions",
        extra_body=GREEDY,
        max_concurrency=3,
    )
    response = asyncio.run(concurrent.system_one(state=STATE, questions=QUESTIONS))
    assert list(response.answers) == list(QUESTIONS)
    for qid, question in QUESTIONS.items():
        assert_valid(response.answers[qid], question)
    assert response.usage.n_calls == 3


def test_auto_gets_a_real_distribution_or_a_label_readout_error_over_twenty_sampled_runs(
    llamacpp: SpawnedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sampled (the server's default temperature), so prose first tokens happen; `auto`'s one retry
    carries the label grammar, which llama.cpp enforces, and its Responses route refuses the logprob
    fields, which is what moves the readout."""
    server = llamacpp
    counts: Counter[str] = Counter()
    for _ in range(20):
        asked = SystemOneClient(
            OpenAI(base_url=server.base_url, api_key="local", max_retries=0),
            model=server.model,
            extra_body={"max_tokens": 16},
        )
        try:
            response = asked.system_one(state=STATE, questions={"intent": QUESTIONS["intent"]})
        except LabelReadoutError:
            counts["label_readout_error"] += 1
            continue
        answer = response.answers["intent"]
        assert_valid(answer, QUESTIONS["intent"])
        assert answer.surface == "chat_completions"
        assert "top_logprobs requires logprobs to be set to true" in response.debug["route"]["why"]
        retried = response.debug["questions"]["intent"]["requests"] > 2  # responses refusal + chat
        counts["distribution_after_grammar_retry" if retried else "distribution_first_try"] += 1
    with capsys.disabled():
        print(f"\nauto over 20 sampled runs on the embedded llama.cpp: {dict(counts)}")
    assert sum(counts.values()) == 20
