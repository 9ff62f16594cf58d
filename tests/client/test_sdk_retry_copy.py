"""The SDK's own retries are switched off through one copy of the caller's client, not one per request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai

from jevper import Choice, SystemOneClient
from jevper.probe.cassettes import load_exchanges

# Recorded from llama.cpp b10434 by the probe harness (chat-logprobs): first token "A", 20 alternatives.
_CASSETTE = Path(__file__).parents[1] / "fixtures" / "providers" / "llamacpp-b10434" / "chat-logprobs.yaml"
BODY = load_exchanges(_CASSETTE)[0].text
QUESTION = {"intent": Choice(criteria={"billing": "money", "technical": "errors", "sales": "pricing"})}


class _Counting(openai.OpenAI):
    """The real SDK client, counting the copies made from it."""

    copies = 0

    def with_options(self, **kwargs: Any) -> Any:
        type(self).copies += 1
        return super().with_options(**kwargs)


def test_a_client_asked_many_times_is_copied_once_and_again_only_when_its_key_changes(loopback: Any) -> None:
    for _ in range(4):
        loopback.reply("/chat/completions", 200, BODY)
    sdk = _Counting(base_url=loopback.url, api_key="first", max_retries=2)
    client = SystemOneClient(sdk, model="smollm2", method="logprobs", api="chat_completions")
    for _ in range(3):
        client.system_one(state="I was charged twice.", questions=QUESTION)
    assert _Counting.copies == 1
    sdk.api_key = "second"
    client.system_one(state="I was charged twice.", questions=QUESTION)
    assert _Counting.copies == 2
