"""What moves an answer: the stability probes grade a server made to move under load, on a cache hit or
with a question's position `moves` on exactly those probes and `identical` elsewhere; a number within
the tolerance is no change to a diff or the gate, one outside it is."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from vcr.request import Request as VcrRequest

from jevper.probe import runner, stability
from jevper.probe.catalogue import CatalogueError, check_catalogue, load_catalogue
from jevper.probe.cli import main
from jevper.probe.compose import requests_for
from jevper.probe.diff import diff_recordings
from jevper.probe.gate import changed
from jevper.probe.grading import grade
from jevper.probe.presets import get_preset
from jevper.probe.recording import Layout, ProbeResult, Recording, Run
from jevper.probe.runner import _in_sent_order
from jevper.probe.session import Target, record
from jevper.probe.stability_report import stability_table
from jevper.testing import moving
from jevper.testing.moving import Move, running

CATALOGUE = load_catalogue()
STABILITY = [p for p in CATALOGUE.probes if p.stability is not None]
#: The probes of the server's own stability (option order is a fact about the model, not the server).
SERVER = [p for p in STABILITY if p.stability != "option-order"]
TOLERANCE = stability.settings().tolerance


def grades(moves: tuple[Move, ...], tmp_path: Path) -> dict[str, ProbeResult]:
    with running(*moves) as server:
        preset = get_preset("llamacpp").with_overrides(base_url=server.base_url, model="m")
        report = record(
            Target(preset, "b1", "moving server", "test"),
            STABILITY,
            catalogue=CATALOGUE,
            layout=Layout.out(tmp_path),
            api_key=None,
            timeout=10,
        )
    assert report.complete
    return {r.id: r for r in report.recording.probes}


def moved(results: dict[str, ProbeResult]) -> set[str]:
    found = set()
    for probe in SERVER:
        record = results[probe.id].stability
        assert record is not None, probe.id
        assert record["grade"] in ("identical", "moves"), (probe.id, record)
        if record["grade"] == "moves":
            found.add(probe.id)
    return found


def test_list_shows_repeat_cache_and_load_per_surface_rename_add_reorder_per_route_and_option_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list", "--only", "*stability*", "--only", "*-option-order", "--only", "*-re*"]) == 0
    listed = {line.split("\t")[0] for line in capsys.readouterr().out.splitlines()}
    for surface in ("chat", "responses", "messages", "systemone", "decisions"):
        assert {f"{surface}-stability-{k}" for k in ("repeat", "cache", "load")} <= listed
    for route in ("systemone", "decisions"):
        assert {f"{route}-rename", f"{route}-reorder"} <= listed and CATALOGUE.get(f"{route}-add")
    assert "chat-option-order" in listed and "chat-stability-cache-off" in listed


def test_a_steady_server_is_identical_on_every_stability_probe(tmp_path: Path) -> None:
    results = grades((), tmp_path)
    assert moved(results) == set()
    assert {
        results[f"{r}-{v}"].grade for r in ("systemone", "decisions") for v in ("rename", "add", "reorder")
    } == {"pass"}


def test_a_server_that_moves_under_load_moves_on_exactly_the_load_probes(tmp_path: Path) -> None:
    # The server holds a wave's requests by the header the runner marks them with, until the wave has met.
    assert runner.WAVE_HEADER == moving.WAVE_HEADER
    results = grades(("load",), tmp_path)
    assert moved(results) == {p.id for p in SERVER if p.stability == "load"}
    load = results["chat-stability-load"].stability
    assert load is not None and load["noise"] == 0 and load["change"] > TOLERANCE


def test_a_server_that_moves_on_a_cache_hit_moves_on_exactly_the_cache_probes_and_not_with_the_cache_off(
    tmp_path: Path,
) -> None:
    results = grades(("cache",), tmp_path)
    expected = {p.id for p in SERVER if p.stability == "cache"} - {"chat-stability-cache-off"}
    assert moved(results) == expected
    assert "messages-stability-cache" in expected  # no logprobs there: the text flipped
    assert results["messages-stability-cache"].stability == {
        "kind": "cache",
        "grade": "moves",
        "change": None,
        "noise": None,
        "tolerance": TOLERANCE,
        "flips": 1,
        "answers": 2,
    }


def test_a_decision_server_whose_answer_depends_on_a_questions_position_fails_reorder_alone(
    tmp_path: Path,
) -> None:
    results = grades(("position",), tmp_path)
    assert moved(results) == {"systemone-reorder", "decisions-reorder"}
    for route in ("systemone", "decisions"):
        assert results[f"{route}-reorder"].grade == "fail"
        assert results[f"{route}-rename"].grade == results[f"{route}-add"].grade == "pass"


def test_option_order_reads_each_option_where_it_stands_and_says_it_is_a_fact_about_the_model(
    tmp_path: Path,
) -> None:
    # The moving server's "model" always answers the first label: the option it picks changes with
    # every rotation, so two of three orders flip.
    result = grades((), tmp_path)["chat-option-order"]
    assert result.stability is not None and result.stability["flips"] == 2
    assert "a fact about the model" in result.verdict


def test_a_load_probe_sends_its_request_among_others_in_one_wave_and_keeps_them_in_sent_order() -> None:
    probe = CATALOGUE.get("chat-stability-load")
    sent = requests_for(probe, CATALOGUE, get_preset("llamacpp"))
    waves = [r.wave for r in sent]
    load = stability.settings().load
    assert waves == [None, None, None] + [1] * (load + 1)
    assert len({r.content for r in sent[3:]}) == load + 1 and sent[3].content == sent[0].content


def readout(**shares: float) -> stability.Readout:
    return stability.Readout({"answer": shares}, {"answer": max(shares, key=lambda k: shares[k])})


def test_a_change_within_the_noise_plus_the_tolerance_is_within_noise_and_beyond_it_moves() -> None:
    base = readout(A=0.80, B=0.15)
    noise = stability.compare(base, readout(A=0.79, B=0.15))
    assert stability.grade(stability.compare(base, base), noise, TOLERANCE) == "identical"
    near = stability.compare(base, readout(A=0.80 - 0.01 - TOLERANCE + 1e-9, B=0.15))
    assert stability.grade(near, noise, TOLERANCE) == "within noise"
    far = stability.compare(base, readout(A=0.80 - 0.01 - TOLERANCE - 1e-6, B=0.15))
    assert stability.grade(far, noise, TOLERANCE) == "moves"
    assert stability.compare(base, readout(A=0.4, B=0.5)).flips == 1


def test_a_stability_probe_must_name_a_plan_the_classifier_and_a_variant_only_where_it_compares_one() -> None:
    probe = CATALOGUE.get("systemone-rename")
    with pytest.raises(CatalogueError, match="stability must name a plan"):
        check_catalogue([replace(probe, stability="sometimes")], CATALOGUE.topics)
    with pytest.raises(CatalogueError, match="set it exactly when"):
        check_catalogue([replace(probe, variant=None)], CATALOGUE.topics)
    with pytest.raises(CatalogueError, match="belong to a stability probe"):
        check_catalogue([replace(probe, stability=None)], CATALOGUE.topics)


def _recording(key: str, change: float, grade: str = "within noise") -> Recording:
    measured = {
        "kind": "repeat",
        "grade": grade,
        "change": change,
        "noise": change,
        "tolerance": TOLERANCE,
        "flips": 0,
        "answers": 4,
    }
    result = ProbeResult(
        id="chat-stability-repeat",
        surface="chat_completions",
        topic="stability",
        status=200,
        outcome="info",
        verdict=f"{grade}: largest change {change:.4g}",
        evidence="",
        elapsed_s=1.0,
        stability=measured,
    )
    return Recording(key, Run(server="llamacpp", release=key), (result,))


def test_diff_and_gate_treat_a_number_within_the_tolerance_as_unchanged_and_report_one_beyond_it() -> None:
    old = _recording("b1", 0.004)
    within = _recording("b2", 0.004 + TOLERANCE * 0.9)
    beyond = _recording("b3", 0.004 + TOLERANCE * 1.5)
    assert within.probes[0].verdict != old.probes[0].verdict  # the matrix text quotes the number
    assert diff_recordings(old, within).changes == ()
    assert [c.probe_id for c in diff_recordings(old, beyond).changes] == ["chat-stability-repeat"]
    probe = CATALOGUE.get("chat-stability-repeat")
    facts = {"stability": "within noise"}
    assert changed(old.probes[0], within.probes[0], facts, facts, probe) == ""
    assert changed(old.probes[0], beyond.probes[0], facts, facts, probe).startswith("stability ")
    moves = _recording("b4", 0.004, grade="moves")
    assert [c.probe_id for c in diff_recordings(old, moves).changes] == ["chat-stability-repeat"]


def test_a_waves_exchanges_are_kept_in_the_order_sent_whichever_answer_came_first() -> None:
    probe = CATALOGUE.get("chat-stability-load")
    wave = [r for r in requests_for(probe, CATALOGUE, get_preset("llamacpp")) if r.wave is not None]
    # vcrpy appends each exchange as its answer arrives: here the last request sent answered first.
    arrived = [
        (VcrRequest("POST", "http://h/v1/chat/completions", r.content, {}), {"n": i})
        for i, r in enumerate(wave)
    ]
    data = ["earlier exchange", *reversed(arrived)]
    _in_sent_order(data, 1, wave)
    assert data == ["earlier exchange", *arrived]


def test_a_stability_probe_that_got_no_answer_is_not_measurable_with_its_reason_on_the_page() -> None:
    # llama.cpp b11549's Responses route refuses the logprob fields: nothing was compared, so neither
    # the matrix nor the page may show a grade for it.
    recorded = Layout.repository().load("llamacpp-b11549")
    probes = [CATALOGUE.get(f"responses-stability-{kind}") for kind in ("repeat", "cache", "load")]
    regraded = grade(recorded, probes, catalogue=CATALOGUE)
    reason = 'not measurable: refused: 400 "top_logprobs requires logprobs to be set to true"'
    for probe in probes:
        result = regraded.result(probe.id)
        assert result is not None and result.stability is None
        assert result.verdict == reason
    rows = [row for row in stability_table([regraded], CATALOGUE).splitlines() if "responses-stab" in row]
    assert len(rows) == 3 and all(reason in row for row in rows)
