"""The Decisions probes: requests written from the openai SDK's types, graded where the schema decides.

The bodies here are shaped as OpenAI documents the route; each test is one behaviour a verdict must tell
apart (a conforming answer, one that breaks the schema, a refusal in or out of OpenAI's envelope, no route).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai.types
import pytest

from jevper.decisions import decision_request
from jevper.probe.cassettes import Exchange
from jevper.probe.catalogue import load_catalogue
from jevper.probe.classifiers import classify
from jevper.probe.compose import requests_for
from jevper.probe.html import build_page, served
from jevper.probe.presets import get_preset
from jevper.probe.recording import ProbeResult, Recording, Run
from jevper.probe.reports import unserved_columns

CATALOGUE = load_catalogue()
PRESET = get_preset("llamacpp")
DECISIONS = [p for p in CATALOGUE.probes if p.surface == "decisions"]
VALID = [p for p in DECISIONS if p.classifier == "decisions_conformance"]
INVALID = [p for p in DECISIONS if p.classifier == "decisions_invalid" and p.raw_body is None]
USAGE = {
    "input_tokens": 40,
    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
    "output_tokens": 3,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 43,
}


def request_of(probe_id: str) -> Any:
    return requests_for(CATALOGUE.get(probe_id), CATALOGUE, PRESET)[-1].json_body


def exchange(probe_id: str, body: Any, status: int = 200) -> Exchange:
    return Exchange(
        method="POST",
        path="/v1/decisions",
        request_body=request_of(probe_id),
        status=status,
        content_type="application/json",
        text=body if isinstance(body, str) else json.dumps(body),
    )


def answer(question: dict[str, Any]) -> dict[str, Any]:
    """A conforming answer to one question: the first value (or level) most probable."""
    name = question.get("name")
    if question["type"] == "predicate":
        return {"type": "predicate", "name": name, "probability": 0.75}
    if question["type"] == "choice":
        values = [c["value"] for c in question["choices"]]
        shares = [0.5] + [0.5 / (len(values) - 1)] * (len(values) - 1)
        listed = [{"value": v, "probability": p} for v, p in zip(values, shares, strict=True)]
        return {
            "type": "choice",
            "name": name,
            "choice": values[0],
            "confidence": 0.25,
            "probabilities": listed,
        }
    labels = [level["label"] for level in question["levels"]]
    shares = [0.6, 0.3, 0.1]
    listed = [
        {"value": i, "label": label, "probability": p}
        for i, (label, p) in enumerate(zip(labels, shares, strict=True))
    ]
    score = sum(i * p for i, p in enumerate(shares))
    return {"type": "score", "name": name, "score": score, "confidence": 0.4, "probabilities": listed}


def decision(probe_id: str) -> dict[str, Any]:
    questions = request_of(probe_id)["questions"]
    return {"answers": [answer(q) for q in questions], "model": "smollm2", "usage": USAGE}


def grade(probe_id: str, body: Any, status: int = 200) -> Any:
    return classify(CATALOGUE.get(probe_id), [exchange(probe_id, body, status)])


@pytest.mark.parametrize("probe", VALID, ids=[p.id for p in VALID])
def test_every_valid_request_is_one_the_clients_own_rules_take(probe: Any) -> None:
    request = decision_request(request_of(probe.id))
    assert request.body()["questions"] == request_of(probe.id)["questions"]


@pytest.mark.parametrize("probe", INVALID, ids=[p.id for p in INVALID])
def test_every_invalid_request_is_one_the_clients_own_rules_refuse(probe: Any) -> None:
    from jevper import InvalidDecisionError

    with pytest.raises(InvalidDecisionError):
        decision_request(request_of(probe.id))


def test_the_probes_ask_what_the_issue_lists_in_the_sdks_shapes() -> None:
    named = request_of("decisions-named-and-unnamed")["questions"]
    assert [q.get("name") for q in named] == ["refund", None, None, "urgency"]
    assert [c["value"] for c in request_of("decisions-choice-booleans")["questions"][0]["choices"]] == [
        True,
        False,
    ]
    roles = [m["role"] for m in request_of("decisions-input-messages")["input"]]
    assert {"system", "developer", "user", "assistant"} <= set(roles)
    parts = {part["type"] for m in request_of("decisions-input-json-part")["input"] for part in m["content"]}
    assert "input_json" in parts
    parts = {part["type"] for m in request_of("decisions-input-image-part")["input"] for part in m["content"]}
    assert "input_image" in parts
    assert len(request_of("decisions-400-questions")["questions"]) == 400
    assert len(request_of("decisions-401-questions")["questions"]) == 401
    assert len(request_of("decisions-256-options")["questions"][0]["choices"]) == 256
    assert "model" not in request_of("decisions-no-model")
    assert request_of("decisions-prompt-cache-key")["prompt_cache_key"]
    assert request_of("decisions-safety-identifier")["safety_identifier"]
    for probe in DECISIONS:  # the API has neither reproducible fields nor a thinking switch
        body = request_of(probe.id) or {}
        assert not {"temperature", "seed", "chat_template_kwargs"} & set(body), probe.id


@pytest.mark.parametrize("probe", VALID, ids=[p.id for p in VALID])
def test_a_conforming_answer_validates_as_the_sdks_decision_and_passes(probe: Any) -> None:
    body = decision(probe.id)
    openai.types.Decision.model_validate(body)

    verdict = grade(probe.id, body)

    assert (verdict.outcome, verdict.grade) == ("supported", "pass"), verdict.text
    assert "in question order" in verdict.text


def test_a_refusal_among_the_answers_is_typed_and_costs_only_its_question() -> None:
    body = decision("decisions-input-string")
    body["answers"][1] = {"type": "refusal", "name": "topic"}

    verdict = grade("decisions-input-string", body)

    assert (verdict.outcome, verdict.grade) == ("supported", "pass")
    assert "1 refusal among them" in verdict.text


def test_answers_out_of_question_order_fail_the_api() -> None:
    body = decision("decisions-named-and-unnamed")
    body["answers"].reverse()

    verdict = grade("decisions-named-and-unnamed", body)

    assert (verdict.outcome, verdict.grade) == ("info", "fail")
    assert "not the API's answer: answers[0].type" in verdict.text


def test_an_unnamed_question_answered_with_a_name_fails_the_api() -> None:
    body = decision("decisions-named-and-unnamed")
    body["answers"][1]["name"] = "topic"

    verdict = grade("decisions-named-and-unnamed", body)

    assert verdict.grade == "fail" and "answers[1].name: expected None" in verdict.text


def test_a_boolean_value_answered_as_text_fails_the_sdks_schema_and_the_typed_values() -> None:
    body = decision("decisions-choice-booleans")
    body["answers"][0]["choice"] = "true"

    verdict = grade("decisions-choice-booleans", body)

    assert verdict.grade == "fail"


def test_probabilities_that_do_not_sum_to_one_fail_the_api() -> None:
    body = decision("decisions-choice-strings")
    body["answers"][0]["probabilities"][0]["probability"] = 0.9

    verdict = grade("decisions-choice-strings", body)

    assert verdict.grade == "fail" and "expected a sum of 1" in verdict.text


def test_a_score_that_is_not_the_expectation_over_its_levels_fails_the_api() -> None:
    body = decision("decisions-score-levels")
    body["answers"][0]["score"] = 2

    verdict = grade("decisions-score-levels", body)

    assert verdict.grade == "fail" and "expected the expected level index" in verdict.text


def test_a_body_without_usage_fails_the_sdks_decision() -> None:
    body = decision("decisions-predicate")
    del body["usage"]

    verdict = grade("decisions-predicate", body)

    assert verdict.grade == "fail" and "usage" in verdict.text


OPENAI_400 = {
    "error": {
        "message": "questions[0].choices: expected 2 to 255 choices, got 1",
        "type": "invalid_request_error",
        "param": "questions[0].choices",
        "code": "invalid_value",
    }
}


def test_an_invalid_request_refused_with_a_400_in_openais_envelope_passes_and_names_the_param() -> None:
    verdict = grade("decisions-one-option", OPENAI_400, 400)

    assert (verdict.outcome, verdict.grade) == ("refused", "pass")
    assert "(param questions[0].choices)" in verdict.text
    assert verdict.facts["status-class"] == "4xx"


def test_a_refusal_outside_openais_envelope_fails_the_api() -> None:
    verdict = grade("decisions-one-option", {"detail": [{"loc": ["body", "questions"], "msg": "bad"}]}, 422)

    assert (verdict.outcome, verdict.grade) == ("refused", "fail")
    assert "not in OpenAI's error envelope" in verdict.text


def test_an_envelope_missing_param_and_code_fails_the_api() -> None:
    verdict = grade(
        "decisions-no-questions", {"error": {"message": "no questions", "type": "bad_request"}}, 400
    )

    assert verdict.grade == "fail" and "error.param: missing" in verdict.text


def test_an_invalid_request_answered_200_or_a_5xx_fails_the_api() -> None:
    accepted = grade("decisions-256-options", decision("decisions-choice-strings"))
    crashed = grade("decisions-unknown-type", {"error": {"message": "KeyError: 'rank'"}}, 500)

    assert (accepted.outcome, accepted.grade) == ("ignored", "fail")
    assert (crashed.outcome, crashed.grade) == ("info", "fail")


def test_a_body_that_is_not_json_refused_in_the_envelope_passes() -> None:
    probe = CATALOGUE.get("decisions-bad-json-body")
    sent = Exchange("POST", "/v1/decisions", probe.raw_body, 400, "application/json", json.dumps(OPENAI_400))

    verdict = classify(probe, [sent])

    assert (verdict.outcome, verdict.grade) == ("refused", "pass")


def test_an_unknown_model_refused_naming_it_passes_and_one_answered_anyway_is_ignored_ungraded() -> None:
    envelope = {
        "error": {
            "message": "The model `jevper-no-such-model` does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
    refused = grade("decisions-unknown-model", envelope, 404)
    answered = grade("decisions-unknown-model", decision("decisions-unknown-model"))

    assert (refused.outcome, refused.grade) == ("refused", "pass") and "naming the model" in refused.text
    assert (answered.outcome, answered.grade) == ("ignored", None)


@pytest.mark.parametrize("probe", DECISIONS, ids=[p.id for p in DECISIONS])
def test_a_server_without_the_route_is_no_route_and_ungraded(probe: Any) -> None:
    body = exchange(
        probe.id, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}, 404
    )

    verdict = classify(probe, [body])

    assert (verdict.outcome, verdict.grade) == ("refused", None)
    # A stability probe had nothing to compare: it says so before the reason.
    measured = probe.stability is not None
    assert verdict.text.startswith("not measurable: ") == measured
    assert verdict.text.removeprefix("not measurable: ").startswith("no route: 404")


def recording(tmp_path: Path, key: str, status: int) -> Recording:
    server, _, release = key.partition("-")
    results = tuple(
        ProbeResult(p.id, p.surface, p.topic, status, "refused", f"no route: {status}", "", 0.1)
        for p in DECISIONS
    )
    run = Run(server=server, release=release, model="smollm2", model_name="m", recorded_on="2026-12-03")
    folder = tmp_path / key
    folder.mkdir()
    return Recording(key, run, results, folder=folder)


def test_a_recording_that_answered_404_to_every_decisions_probe_does_not_serve_the_surface(
    tmp_path: Path,
) -> None:
    without = recording(tmp_path, "llamacpp-b11549", 404)
    refusing = recording(tmp_path, "vllm-0.33.0", 400)

    assert "decisions" not in served(without, CATALOGUE)
    assert "decisions" in served(refusing, CATALOGUE)
    assert {"chat_completions", "systemone"} <= set(served(without, CATALOGUE))
    page = build_page([without, refusing], CATALOGUE, source="fixtures")
    kinds = {
        (cell.key, cell.kind)
        for group in page.groups
        for row in group.rows
        if row.surface == "decisions"
        for cell in row.cells
    }
    assert kinds == {("llamacpp-b11549", "unserved"), ("vllm-0.33.0", "refused")}
    assert [r.key for r in unserved_columns("decisions", [without, refusing], CATALOGUE)] == [
        "llamacpp-b11549"
    ]


def test_list_shows_every_decisions_probe_on_its_own_surface(capsys: pytest.CaptureFixture[str]) -> None:
    from jevper.probe.cli import main

    assert main(["list", "--only", "decisions-*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[:2] for line in lines] == [[p.id, "decisions"] for p in DECISIONS]
    assert len(lines) == len(DECISIONS) > 0


def client_answer(question: Any) -> Any:
    """jevper's own answer to one question, uneven so that a peak and an expectation are checked."""
    from jevper.models import ChoiceAnswer, NoulAnswer, ScoreAnswer

    if question.type == "predicate":
        return NoulAnswer(0.8, {"yes": 0.8, "no": 0.2}, 0.6, "logprobs", "chat_completions")
    if question.type == "choice":
        options = question.question.options
        shares = [2.0 ** -(i + 1) for i in range(len(options))]
        shares[-1] += 1 - sum(shares)
        shared = dict(zip(options, shares, strict=True))
        return ChoiceAnswer(options[0], shared, 0.3, "logprobs", "chat_completions")
    shares = [0.2, 0.5, 0.3]
    expected = sum(i * p for i, p in enumerate(shares))
    legend = dict(enumerate(question.labels))
    return ScoreAnswer(expected, dict(enumerate(shares)), legend, 0.5, "logprobs", "chat_completions")


@pytest.mark.parametrize("probe", VALID, ids=[p.id for p in VALID])
def test_the_clients_own_decisions_body_for_each_valid_probe_passes_the_grading(probe: Any) -> None:
    from jevper.decisions.answers import DecisionResponse, DecisionUsage, answered

    request = decision_request(request_of(probe.id))
    body = DecisionResponse(
        tuple(answered(q, client_answer(q)) for q in request.questions), "smollm2", DecisionUsage(40, 3)
    ).to_api()

    verdict = grade(probe.id, body)

    assert (verdict.outcome, verdict.grade) == ("supported", "pass"), verdict.text
