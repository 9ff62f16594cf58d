"""Classifiers read the decisive fact of an exchange: built here from small bodies shaped like the
recorded ones (vLLM's and llama.cpp's wordings), one per behaviour a verdict must tell apart."""

from __future__ import annotations

import json
from typing import Any

from jevper.probe.cassettes import Exchange
from jevper.probe.catalogue import load_catalogue
from jevper.probe.classifiers import classify

CATALOGUE = load_catalogue()


def exchange(probe_id: str, body: Any, status: int = 200) -> Exchange:
    probe = CATALOGUE.get(probe_id)
    return Exchange(
        method="POST",
        path=f"/v1{probe.path}",
        request_body={"model": "smollm2", **probe.body},
        status=status,
        content_type="application/json",
        text=json.dumps(body),
    )


def chat_answer(text: str, tokens: list[str], finish: str) -> dict[str, Any]:
    entries = [{"token": t, "logprob": -0.1, "top_logprobs": [{"token": t, "logprob": -0.1}]} for t in tokens]
    return {
        "object": "chat.completion",
        "model": "smollm2",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
                "logprobs": {"content": entries},
            }
        ],
        "usage": {"prompt_tokens": 30, "completion_tokens": len(tokens), "total_tokens": 30 + len(tokens)},
    }


def test_a_long_answer_that_ends_by_itself_shows_its_end_of_turn_token_and_finish_reason() -> None:
    probe = CATALOGUE.get("chat-logprobs-long")
    body = chat_answer("Sky is blue.", ["Sky", " is", " blue", ".", "<|im_end|>"], "stop")

    verdict = classify(probe, [exchange(probe.id, body)])

    assert "finish_reason stop" in verdict.text
    assert "trailing non-text tokens ['<|im_end|>']" in verdict.text


def test_a_long_answer_cut_at_the_budget_says_no_end_of_turn_could_follow() -> None:
    probe = CATALOGUE.get("chat-logprobs-long")
    body = chat_answer("Sky is", ["Sky", " is"], "length")

    verdict = classify(probe, [exchange(probe.id, body)])

    assert "finish_reason length" in verdict.text
    assert "cut at the budget" in verdict.text


def test_the_long_logprob_probe_leaves_room_for_the_answer_to_end_by_itself() -> None:
    assert CATALOGUE.get("chat-logprobs-long").body["max_tokens"] >= 64


def responses_answer(text: str, status: str) -> dict[str, Any]:
    return {
        "object": "response",
        "model": "smollm2",
        "status": status,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "status": status,
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 20, "output_tokens": 32, "total_tokens": 52},
    }


def test_a_schema_shaped_answer_cut_at_the_budget_is_enforced_not_ignored() -> None:
    probe = CATALOGUE.get("responses-strict-schema")
    body = responses_answer('{\n "canary" : "JEVPER-PROBE"\n\n,\n\n "count" :', "incomplete")

    verdict = classify(probe, [exchange(probe.id, body)])

    assert verdict.outcome == "supported"
    assert verdict.text.startswith("enforced (cut at the budget, incomplete)")


def test_a_cut_answer_without_the_canary_is_still_ignored() -> None:
    probe = CATALOGUE.get("responses-strict-schema")
    body = responses_answer("The first one is a fruit, but", "incomplete")

    assert classify(probe, [exchange(probe.id, body)]).outcome == "ignored"


def test_a_complete_answer_naming_the_canary_is_enforced() -> None:
    probe = CATALOGUE.get("responses-strict-schema")
    body = responses_answer('{"canary": "JEVPER-PROBE", "count": 2}', "completed")

    verdict = classify(probe, [exchange(probe.id, body)])

    assert (verdict.outcome, verdict.text) == ("supported", "enforced: the answer names JEVPER-PROBE")


def test_every_answered_probe_of_every_recording_reports_the_fact_its_rule_compares() -> None:
    from jevper.probe.cassettes import load_exchanges
    from jevper.probe.recording import Layout

    layout = Layout.repository()
    for recording in layout.recordings():
        for probe in (CATALOGUE.get(result.id) for result in recording.probes):
            exchanges = load_exchanges(recording.cassette(probe.id))
            verdict = classify(probe, exchanges)
            if exchanges and exchanges[-1].status == 200 and probe.compare != "outcome":
                assert probe.compare in verdict.facts, (recording.key, probe.id, verdict.facts)
