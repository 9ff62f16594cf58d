"""Agreement with the reference compares each probe's decisive fact, named by its rule in the catalogue."""

from __future__ import annotations

import pytest

from jevper.probe.agreement import RULES, agrees
from jevper.probe.catalogue import load_catalogue
from jevper.probe.recording import ProbeResult
from jevper.probe.reference import ReferenceEntry, annotate, load_reference

CATALOGUE = load_catalogue()


def result(probe_id: str, outcome: str, verdict: str = "") -> ProbeResult:
    probe = CATALOGUE.get(probe_id)
    return ProbeResult(probe_id, probe.surface, probe.topic, 200, outcome, verdict, "", 0.1)  # type: ignore[arg-type]


def test_a_text_block_does_not_agree_with_a_reference_that_saw_only_a_thinking_block() -> None:
    recorded = result("messages-plain", "supported", "route exists; blocks: text; stop_reason end_turn")

    annotated = annotate(recorded, "vllm", {"blocks": ["text"]})

    assert annotated.agrees_with_reference is False
    assert annotate(recorded, "vllm", {"blocks": ["thinking"]}).agrees_with_reference is True


def test_a_500_does_not_agree_with_a_reference_400_although_both_are_refusals() -> None:
    refused = result("chat-system-after-user", "refused")

    assert annotate(refused, "vllm", {"status-class": "5xx"}).agrees_with_reference is False
    assert annotate(refused, "vllm", {"status-class": "4xx"}).agrees_with_reference is True


def test_a_different_count_of_alternatives_disagrees_and_the_same_count_agrees() -> None:
    entry = ReferenceEntry("supported", "20 alternatives", 20)
    supported = result("chat-logprobs", "supported")

    assert entry.agrees(supported, "alternatives", {"alternatives": 5}) is False
    assert entry.agrees(supported, "alternatives", {"alternatives": 20}) is True


def test_an_outcome_rule_compares_the_outcome_alone_and_a_missing_fact_compares_nothing_more() -> None:
    assert agrees("outcome", "ignored", {}, "ignored", None)
    assert not agrees("outcome", "supported", {}, "ignored", None)
    assert agrees("blocks", "supported", {"blocks": ["text"]}, "supported", None)


def test_an_unanswered_probe_is_not_compared() -> None:
    entry = ReferenceEntry("supported", "accepted", "2xx")
    assert entry.agrees(result("chat-developer-role", "fault"), "status-class", {}) is None


def test_every_probe_names_a_known_rule_and_every_rule_but_the_outcome_is_some_probe_s() -> None:
    used = {probe.compare for probe in CATALOGUE.probes}
    assert used <= set(RULES)
    assert set(RULES) - used == set()


@pytest.mark.parametrize("server", sorted(load_reference()))
def test_a_reference_fact_is_stated_only_for_probes_whose_rule_compares_a_fact(server: str) -> None:
    for probe_id, entry in load_reference()[server].probes.items():
        if entry.fact is not None:
            assert CATALOGUE.get(probe_id).compare != "outcome", (server, probe_id)
