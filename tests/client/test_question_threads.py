"""Where the blocking client asks a call's questions: on the caller's thread while the server answers at
once, on the pool once one waits (past a timer, or longer than the client worked on it), and nothing more
after a question failed. (Questions that wait on the server run side by side:
test_readout_rules.py's max_concurrency test.) Against the loopback fault server in scripted mode."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from openai import OpenAI

from jevper import Choice, ProviderError, SystemOneClient
from jevper.testing.bodies import chat_label

INTENT = Choice(criteria={"billing": "money", "technical": "errors", "sales": "pricing"})
SIX = {f"q{i}": INTENT for i in range(6)}
#: A healthy label answer, queued for every question.
LABEL = chat_label()


def client(loopback: Any, threads: list[int]) -> SystemOneClient:
    def sent(request: httpx.Request) -> None:
        threads.append(threading.get_ident())

    http = httpx.Client(event_hooks={"request": [sent]})
    sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0, http_client=http)
    return SystemOneClient(sdk, model="smollm2", method="logprobs", api="chat_completions")


def test_questions_answered_at_once_are_all_asked_on_the_callers_thread(
    loopback: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Far above any loopback answer on a busy machine, whose wall time may be a descheduled thread's.
    monkeypatch.setattr("jevper._spread.FAN_OUT_AFTER_S", 30.0)
    monkeypatch.setattr("jevper._spread.WAITED_OVER_WORKED", 1e6)
    for _ in SIX:
        loopback.reply("/chat/completions", 200, LABEL)
    threads: list[int] = []
    response = client(loopback, threads).system_one(state="I was charged twice.", questions=SIX)
    assert list(response.answers) == list(SIX) and response.usage.n_calls == len(SIX)
    assert threads == [threading.get_ident()] * len(SIX)


def test_no_question_starts_after_one_failed_and_its_error_is_the_calls(
    loopback: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("jevper._spread.FAN_OUT_AFTER_S", 30.0)
    monkeypatch.setattr("jevper._spread.WAITED_OVER_WORKED", 1e6)
    loopback.reply("/chat/completions", 200, LABEL)
    loopback.reply("/chat/completions", 400, {"error": {"message": "bad request", "type": "invalid"}})
    for _ in range(4):
        loopback.reply("/chat/completions", 200, LABEL)
    with pytest.raises(ProviderError, match="bad request"):
        client(loopback, []).system_one(state="I was charged twice.", questions=SIX)
    assert len(loopback.bodies("/chat/completions")) == 2


def test_a_question_that_waits_on_the_server_starts_the_others_beside_it(loopback: Any) -> None:
    loopback.delay = 0.3
    for _ in SIX:
        loopback.reply("/chat/completions", 200, LABEL)
    threads: list[int] = []
    response = client(loopback, threads).system_one(state="I was charged twice.", questions=SIX)
    assert list(response.answers) == list(SIX)
    assert loopback.most_in_flight == len(SIX)
    assert threads[0] == threading.get_ident() and len(set(threads)) == len(SIX)


def test_a_question_that_waited_longer_than_the_client_worked_starts_the_others_after_it(
    loopback: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server quicker than the timer, but slower than the client's own work on a request: the first
    # answer's wait starts the other five at once. 0.3 s, as above: at 0.1 s, six test workers on two
    # cores once had only three of the five in flight together.
    monkeypatch.setattr("jevper._spread.FAN_OUT_AFTER_S", 30.0)
    loopback.delay = 0.3
    for _ in SIX:
        loopback.reply("/chat/completions", 200, LABEL)
    threads: list[int] = []
    response = client(loopback, threads).system_one(state="I was charged twice.", questions=SIX)
    assert list(response.answers) == list(SIX)
    assert threads[0] == threading.get_ident() and len(set(threads[1:])) == len(SIX) - 1
    assert loopback.most_in_flight == len(SIX) - 1


def test_after_a_call_whose_questions_waited_the_next_starts_them_all_at_once(
    loopback: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Waiting for the first question's wait again made a four-slot llama.cpp's 8-question call slower.
    loopback.delay = 0.1
    for _ in range(2 * len(SIX)):
        loopback.reply("/chat/completions", 200, LABEL)
    asker = client(loopback, [])
    asker.system_one(state="I was charged twice.", questions=SIX)  # the first question's wait spreads
    monkeypatch.setattr("jevper._spread.FAN_OUT_AFTER_S", 30.0)
    monkeypatch.setattr("jevper._spread.WAITED_OVER_WORKED", 1e6)
    loopback.most_in_flight = 0
    # All six in flight together: 0.3 s, as in the tests above (at 0.1 s, a loaded machine once had only
    # three of five in flight at once).
    loopback.delay = 0.3
    response = asker.system_one(state="I was charged twice.", questions=SIX)
    assert list(response.answers) == list(SIX)
    assert loopback.most_in_flight == len(SIX)


def test_max_concurrency_bounds_the_clients_requests_across_calls_made_at_once(loopback: Any) -> None:
    # Five callers at once, each asking a call of one question or of two: the client's limit of two
    # holds across them, the callers' own threads included (they ask their calls' first questions).
    loopback.delay = 0.3
    for _ in range(8):
        loopback.reply("/chat/completions", 200, LABEL)
    sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    shared = SystemOneClient(
        sdk, model="smollm2", method="logprobs", api="chat_completions", max_concurrency=2
    )
    calls = [
        {"q": INTENT},
        {"q": INTENT, "r": INTENT},
        {"q": INTENT},
        {"q": INTENT, "r": INTENT},
        {"q": INTENT},
    ]
    answered: list[int] = []

    def ask(questions: dict[str, Choice]) -> None:
        answered.append(len(shared.system_one(state="I was charged twice.", questions=questions).answers))

    callers = [threading.Thread(target=ask, args=(questions,)) for questions in calls]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=30)
    assert sorted(answered) == [1, 1, 1, 2, 2]
    assert loopback.most_in_flight == 2
