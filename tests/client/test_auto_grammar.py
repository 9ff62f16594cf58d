"""method="auto" on a label readout: the label grammar from the first request, dropped once and for the
client's life where a server refuses the field (scripted server, the real openai SDK)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from jevper import Choice, SystemOneClient, SystemOneResponse
from jevper.testing.bodies import chat_label
from jevper.testing.faults import FaultServer, running
from jevper.testing.script import Script

QUESTION = Choice(instructions="Which team?", criteria={"billing": None, "shipping": None, "technical": None})
#: OpenAI's own words for a field it does not know (the wording table's row).
REFUSED = {
    "error": {"message": "Unrecognized request argument supplied: grammar", "type": "invalid_request_error"}
}


@pytest.fixture
def scripted() -> Iterator[tuple[Script, FaultServer]]:
    script = Script()
    with running(script=script, model="m") as server:
        yield script, server


def client(server: FaultServer, method: str = "auto") -> SystemOneClient:
    sdk = openai.OpenAI(base_url=server.base_url(), api_key="local", max_retries=0)
    return SystemOneClient(sdk, model="m", api="chat_completions", method=method)


def test_auto_sends_the_label_grammar_in_its_first_request_and_reads_one_answer(
    scripted: tuple[Script, FaultServer],
) -> None:
    script, server = scripted
    script.reply("/chat/completions", 200, chat_label())
    answer = client(server).system_one(state="charged twice", questions={"q": QUESTION}).answers["q"]
    (body,) = script.bodies("/chat/completions")
    assert body["grammar"] == 'root ::= "A" | "B" | "C"' and body["logprobs"] is True
    assert answer.method == "grammar"


def test_a_server_that_refuses_the_grammar_is_asked_without_it_and_never_sent_it_again(
    scripted: tuple[Script, FaultServer],
) -> None:
    script, server = scripted
    script.reply("/chat/completions", 400, REFUSED)
    script.reply("/chat/completions", 200, chat_label())
    script.reply("/chat/completions", 200, chat_label())
    asked = client(server)
    first = asked.system_one(state="charged twice", questions={"q": QUESTION})
    second = asked.system_one(state="charged twice", questions={"q": QUESTION})
    bodies = script.bodies("/chat/completions")
    assert ["grammar" in b for b in bodies] == [True, False, False]
    assert first.answers["q"].method == second.answers["q"].method == "logprobs"
    assert any("dropped grammar" in why for why in first.debug["questions"]["q"]["why"])


def test_an_explicit_logprobs_method_never_sends_a_grammar(scripted: tuple[Script, FaultServer]) -> None:
    script, server = scripted
    script.reply("/chat/completions", 200, chat_label())
    client(server, method="logprobs").system_one(state="charged twice", questions={"q": QUESTION})
    assert "grammar" not in script.bodies("/chat/completions")[0]


def prose_label() -> dict[str, Any]:
    """A server that ignores the grammar: the label, then more words."""
    body = chat_label()
    body["choices"][0]["message"]["content"] = "A: billing"
    return body


def asked_in_turn(
    scripted: tuple[Script, FaultServer], reply: dict[str, Any], times: int, **settings: Any
) -> tuple[list[SystemOneResponse], list[dict[str, Any]]]:
    """One client asks the question ``times`` times, each answered ``reply``: its answers and bodies."""
    script, server = scripted
    for _ in range(times):
        script.reply("/chat/completions", 200, reply)
    sdk = openai.OpenAI(base_url=server.base_url(), api_key="local", max_retries=0)
    asked = SystemOneClient(sdk, model="m", api="chat_completions", **settings)
    answers = [asked.system_one(state="charged twice", questions={"q": QUESTION}) for _ in range(times)]
    return answers, script.bodies("/chat/completions")


def test_once_the_grammar_held_a_label_is_asked_with_a_budget_of_one_token(
    scripted: tuple[Script, FaultServer],
) -> None:
    # llama.cpp decodes once more after the label, for the end the grammar forces, unless the budget
    # ends it first; only a grammar seen to hold gets the budget (a reply of exactly one label).
    answers, bodies = asked_in_turn(scripted, chat_label(), 3)
    assert [b.get("max_tokens") for b in bodies] == [None, 1, 1]
    assert all(b["grammar"] == 'root ::= "A" | "B" | "C"' for b in bodies)
    assert [a.answers["q"].method for a in answers] == ["grammar"] * 3
    assert answers[1].answers["q"].probabilities == answers[0].answers["q"].probabilities


def test_a_server_that_ignores_the_grammar_never_gets_the_label_budget(
    scripted: tuple[Script, FaultServer],
) -> None:
    _, bodies = asked_in_turn(scripted, prose_label(), 2)
    assert [b.get("max_tokens") for b in bodies] == [None, None]


def test_a_callers_own_max_tokens_wins_over_the_label_budget(scripted: tuple[Script, FaultServer]) -> None:
    _, bodies = asked_in_turn(scripted, chat_label(), 2, extra_body={"max_tokens": 5})
    assert [b["max_tokens"] for b in bodies] == [5, 5]
