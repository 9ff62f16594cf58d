"""A Choice wider than the labels, read in rounds of label readouts (jevper._rounds), through the real
openai SDK against a loopback server: how the options are grouped, and the chain of the readouts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _label_answers import label
from openai import OpenAI

from jevper import Choice, SystemOneClient
from jevper._ask import MAX_LABELS
from jevper._rounds import GROUP_CHARS, groups

STATE = "This is case number 3."
WIDE = Choice(criteria={f"o{i}": None for i in range(27)})


def test_the_groups_of_a_wide_choice_fit_a_label_readout_and_keep_every_option_once() -> None:
    for count in (27, 52, 53, 64, 128, 255):
        split = groups(Choice(criteria={f"o{i}": None for i in range(count)}))
        assert [o for g in split for o in g] == [f"o{i}" for i in range(count)]
        assert max(map(len, split)) <= MAX_LABELS and max(map(len, split)) - min(map(len, split)) <= 1
    long = groups(Choice(criteria={f"o{i}": "x" * 1000 for i in range(27)}))
    assert all(sum(1000 + len(o) for o in g) <= GROUP_CHARS or len(g) <= 2 for g in long)


@pytest.mark.parametrize("method", ["logprobs", "grammar", "auto"])
def test_a_choice_of_twenty_seven_options_is_the_chain_of_its_groups_readouts_and_the_winners_readout(
    loopback: Any, method: str
) -> None:
    # Groups o0-o13 and o14-o26, asked one after the other; then their winners, o1 and o14, as A and B.
    loopback.reply("/chat/completions", 200, label("B", {"B": 0.6, "A": 0.4}))
    loopback.reply("/chat/completions", 200, label("A", {"A": 0.9, "C": 0.1}))
    loopback.reply("/chat/completions", 200, label("B", {"B": 0.75, "A": 0.25}))
    sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    client = SystemOneClient(sdk, model="smollm2", api="chat_completions", method=method)
    response = client.system_one(state=STATE, questions={"case": WIDE})
    answer: Any = response.answers["case"]
    expected = {"o0": 0.25 * 0.4, "o1": 0.25 * 0.6, "o14": 0.75 * 0.9, "o16": 0.75 * 0.1}
    assert answer.probabilities == pytest.approx({o: expected.get(o, 0.0) for o in WIDE.options})
    assert list(answer.probabilities) == list(WIDE.options)
    assert answer.choice == "o14"
    assert answer.confidence == pytest.approx((0.675 - 1 / 27) / (1 - 1 / 27))
    sent = loopback.bodies("/chat/completions")
    assert len(sent) == 3 and response.usage.n_calls == 3 and response.usage.input_tokens == 300
    prompts = ["\n".join(str(m["content"]) for m in body["messages"]) for body in sent]
    asked = [[line.partition(": ")[2] for line in p.splitlines() if line[1:3] == ": "] for p in prompts]
    assert asked == [[f"o{i}" for i in range(14)], [f"o{i}" for i in range(14, 27)], ["o1", "o14"]]
    why = response.debug["questions"]["case"]["why"]
    assert why[0] == "27 options exceed the 26 labels: answered in rounds of readouts"


def test_a_wide_choice_asked_in_json_is_asked_whole(loopback: Any) -> None:
    even = {"object": "chat.completion", "model": "smollm2", "choices": [], "usage": {}}
    even["choices"] = [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": json.dumps(dict.fromkeys(WIDE.options, 0.037))},
        }
    ]
    loopback.reply("/chat/completions", 200, even)
    sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    client = SystemOneClient(sdk, model="smollm2", api="chat_completions", method="structured")
    answer: Any = client.system_one(state=STATE, questions={"case": WIDE}).answers["case"]
    assert answer.method == "structured" and len(loopback.bodies("/chat/completions")) == 1
    assert sum(answer.probabilities.values()) == pytest.approx(1.0)
