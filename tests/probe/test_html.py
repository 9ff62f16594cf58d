"""The capability page's content, checked offline: on small recordings written for each test, and on
the committed fixtures (the committed reports/index.html must be what they regenerate)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from vcr.request import Request
from vcr.serialize import serialize
from vcr.serializers import yamlserializer

from jevper.probe.catalogue import load_catalogue
from jevper.probe.html import (
    COMMAND,
    Page,
    PageError,
    build_page,
    render_index,
    render_layout,
    served,
    write_index,
)
from jevper.probe.recording import Layout, ProbeResult, Recording, Run, repository_root

CATALOGUE = load_catalogue()


def probe(pid: str, outcome: str, verdict: str, **extra: Any) -> ProbeResult:
    spec = CATALOGUE.get(pid)
    fields: dict[str, Any] = {
        "id": pid,
        "surface": spec.surface,
        "topic": spec.topic,
        "status": 200,
        "outcome": outcome,
        "verdict": verdict,
        "evidence": f"evidence of {pid}",
        "elapsed_s": 0.25,
    }
    return ProbeResult(**{**fields, **extra})


def recording(
    root: Path, key: str, probes: list[ProbeResult], *, provenance: str = "recorded", bodies: Any = None
) -> Recording:
    server, release = key.split("-", 1)
    if provenance == "recorded":
        # A probe that got no answer has no exchange to record.
        for p in probes:
            if p.status is None:
                continue
            body = (bodies or {}).get(p.id, {"choices": [{"text": p.verdict}]})
            request = {"model": "smollm2", "probe": p.id}
            write_cassette(root / key / f"{p.id}.yaml", request, p.status, body)
    run = Run(
        server=server,
        release=release.removesuffix("-reference"),
        model="smollm2",
        model_name="SmolLM2-135M-Instruct (F16)",
        recorded_on="2026-11-29" if provenance == "recorded" else "",
        command=f"python -m jevper.probe --server {server}",
    )
    folder = root / key if provenance == "recorded" else None
    return Recording(key, run, tuple(probes), provenance=provenance, folder=folder)  # type: ignore[arg-type]


def write_cassette(path: Path, request: Any, status: int, body: Any) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    uri = "http://127.0.0.1/v1/chat/completions"
    data = {
        "requests": [Request("POST", uri, json.dumps(request).encode(), {})],
        "responses": [{"status": {"code": status, "message": "OK"}, "headers": {}, "body": {"string": text}}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(serialize(data, yamlserializer), encoding="utf-8")


def page_of(root: Path, *recordings: Recording) -> Page:
    return build_page(recordings, CATALOGUE, source="fixtures")


def html_of(root: Path, *recordings: Recording) -> str:
    return render_index(recordings, CATALOGUE, source="tests/fixtures/providers")


def cell(page: Page, key: str, pid: str) -> Any:
    index = [c.key for c in page.columns].index(key)
    return next(r.cells[index] for g in page.groups for r in g.rows if r.probe_id == pid)


def test_every_outcome_maps_to_one_kind_with_its_own_marker(tmp_path: Path) -> None:
    rec = recording(
        tmp_path,
        "llamacpp-b10434",
        [
            probe("chat-logprobs", "supported", "20 alternatives"),
            probe("chat-n-two", "refused", "400: n must be 1", status=400),
            probe("chat-unknown-field", "ignored", "ignored"),
            probe("chat-cache-key", "info", "cached at usage.prompt_tokens_details"),
            probe("chat-grammar", "supported", "honoured", agrees_with_reference=False, reference="ignored"),
            probe("chat-stream-zero", "fault", "connection reset", status=None),
            probe("chat-bad-path", "timeout", "no answer in 30 s", status=None),
            probe("chat-developer-role", "not-run", "not run", status=None),
        ],
    )
    page = page_of(tmp_path, rec)
    kinds = {r.probe_id: r.cells[0].kind for g in page.groups for r in g.rows}
    assert {k: v for k, v in kinds.items() if v != "not-recorded"} == {
        "chat-logprobs": "supported",
        "chat-n-two": "refused",
        "chat-unknown-field": "ignored",
        "chat-cache-key": "info",
        "chat-grammar": "differs",
        "chat-stream-zero": "fault",
        "chat-bad-path": "fault",
    }
    assert kinds["chat-developer-role"] == "not-recorded"
    markers = {r.cells[0].kind: r.cells[0].marker for g in page.groups for r in g.rows}
    assert len(set(markers.values())) == len(markers) == 7
    assert cell(page, "llamacpp-b10434", "chat-stream-zero").status == "no response"


def test_every_catalogue_probe_has_a_row_even_when_no_recording_has_it(tmp_path: Path) -> None:
    rec = recording(tmp_path, "llamacpp-b10434", [probe("chat-logprobs", "supported", "20 alternatives")])
    page = page_of(tmp_path, rec)
    by_topic = [p.id for t in CATALOGUE.topics for p in CATALOGUE.probes if p.topic == t.id]
    assert [r.probe_id for g in page.groups for r in g.rows] == by_topic
    assert page.probe_count == len(CATALOGUE)
    assert [g.title for g in page.groups] == [t.title for t in CATALOGUE.topics]
    assert cell(page, "llamacpp-b10434", "messages-plain").kind == "not-recorded"
    assert cell(page, "llamacpp-b10434", "messages-plain").verdict == "not recorded"


def test_columns_put_recordings_first_by_server_and_release_numerically_then_transcribed(
    tmp_path: Path,
) -> None:
    one = [probe("chat-logprobs", "supported", "yes")]
    recs = [
        recording(tmp_path, "vllm-0.32.0", one),
        recording(tmp_path, "llamacpp-b10434", one),
        recording(tmp_path, "llamacpp-b11139-reference", one, provenance="transcribed"),
        recording(tmp_path, "llamacpp-b9999", one),
    ]
    assert [c.key for c in page_of(tmp_path, *recs).columns] == [
        "llamacpp-b9999",
        "llamacpp-b10434",
        "vllm-0.32.0",
        "llamacpp-b11139-reference",
    ]


def test_columns_run_by_server_kind_as_the_presets_list_them_not_alphabetically(tmp_path: Path) -> None:
    one = [probe("chat-logprobs", "supported", "yes")]
    keys = ["callo-0.3.1", "jevper-0.1.0", "laya-0.2.1", "llamacpp-b11549", "ollama-0.35.0", "vllm-0.32.0"]
    recs = [recording(tmp_path, key, one) for key in keys]
    assert [c.key for c in page_of(tmp_path, *recs).columns] == [
        "llamacpp-b11549",
        "vllm-0.32.0",
        "ollama-0.35.0",
        "callo-0.3.1",
        "laya-0.2.1",
        "jevper-0.1.0",
    ]


def test_a_system_one_server_refusing_a_surface_it_does_not_serve_is_not_served_not_refused(
    tmp_path: Path,
) -> None:
    refused = [
        probe("chat-logprobs", "refused", "404, not found", status=404),
        probe("systemone-route", "refused", "refused: 422 'bad'", status=422),
    ]
    answered = [probe("chat-logprobs", "supported", "20 alternatives")]
    page = page_of(
        tmp_path,
        recording(tmp_path, "laya-0.2.1", refused),
        recording(tmp_path / "b", "jevper-0.1.0", answered),
        # callo's chat refusal is a 400: a 404 to every chat probe it holds would say it has no such route.
        recording(tmp_path / "c", "callo-0.3.1", [replace(refused[0], status=400), refused[1]]),
    )
    assert cell(page, "laya-0.2.1", "chat-logprobs").kind == "unserved"
    assert cell(page, "laya-0.2.1", "chat-logprobs").verdict == "404, not found"  # kept for the evidence
    assert cell(page, "laya-0.2.1", "systemone-route").kind == "refused"  # its own route: a refusal
    assert cell(page, "jevper-0.1.0", "chat-logprobs").kind == "supported"  # an answer is shown as one
    assert cell(page, "callo-0.3.1", "chat-logprobs").kind == "refused"  # callo serves the chat surfaces


def test_an_answer_that_breaks_the_api_is_its_own_kind(tmp_path: Path) -> None:
    failing = probe("systemone-route", "info", "200, but not the API's answer: x", grade="fail")
    passing = probe("systemone-no-model", "supported", "200; 3 answers", grade="pass")
    page = page_of(tmp_path, recording(tmp_path, "callo-0.3.1", [failing, passing]))
    assert cell(page, "callo-0.3.1", "systemone-route").kind == "fails"
    assert cell(page, "callo-0.3.1", "systemone-no-model").kind == "supported"


def test_the_header_says_where_each_column_came_from(tmp_path: Path) -> None:
    one = [probe("chat-logprobs", "supported", "yes")]
    recs = [
        recording(tmp_path, "llamacpp-b10434", one),
        recording(tmp_path, "ollama-0.34.3-reference", one, provenance="transcribed"),
    ]
    html = html_of(tmp_path, *recs)
    head = html[html.index("<thead>") : html.index("</thead>")]
    assert 'llama.cpp</span> <span class="release">b10434' in head
    assert "recorded live 2026-11-29" in head
    assert "SmolLM2-135M-Instruct (F16)" in head
    assert 'ollama</span> <span class="release">0.34.3' in head
    assert "transcribed from the reference" in head


def test_a_verdict_that_changed_between_two_releases_is_flagged_on_the_later_one(tmp_path: Path) -> None:
    old = recording(
        tmp_path,
        "llamacpp-b10434",
        [probe("chat-logprobs", "supported", "20 alternatives"), probe("chat-n-two", "refused", "400")],
    )
    new = recording(
        tmp_path,
        "llamacpp-b11434",
        [
            probe("chat-logprobs", "supported", "20 alternatives"),
            probe("chat-n-two", "supported", "2 choices"),
        ],
    )
    other = recording(tmp_path, "vllm-0.32.0", [probe("chat-n-two", "supported", "2 choices")])
    page = page_of(tmp_path, new, other, old)
    assert cell(page, "llamacpp-b11434", "chat-n-two").changed_from == ("b10434", "400")
    assert cell(page, "llamacpp-b11434", "chat-n-two").verdict == "2 choices"
    assert cell(page, "llamacpp-b11434", "chat-logprobs").changed_from is None
    assert cell(page, "llamacpp-b10434", "chat-n-two").changed_from is None
    assert cell(page, "vllm-0.32.0", "chat-n-two").changed_from is None
    assert html_of(tmp_path, new, other, old).count('class="delta"') == 1


def test_the_evidence_is_read_from_the_cassette_and_pruned(tmp_path: Path) -> None:
    body = {"choices": [{"logprobs": {"content": [{"top_logprobs": list(range(20))}]}}], "text": "x" * 500}
    probes = [probe("chat-logprobs", "supported", "20")]
    rec = recording(tmp_path, "llamacpp-b10434", probes, bodies={"chat-logprobs": body})
    exchange = cell(page_of(tmp_path, rec), "llamacpp-b10434", "chat-logprobs").exchanges[0]
    assert exchange.request_line == "POST /v1/chat/completions"
    assert '"probe": "chat-logprobs"' in exchange.request_body
    assert exchange.status == "200"
    assert "… 15 more" in exchange.response_excerpt
    assert "(500 characters)" in exchange.response_excerpt
    assert "x" * 161 not in exchange.response_excerpt


def test_markup_in_a_response_reaches_the_page_escaped(tmp_path: Path) -> None:
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    rec = recording(
        tmp_path,
        "llamacpp-b10434",
        [probe("chat-bad-path", "refused", "404 <b>not found</b>", status=404)],
        bodies={"chat-bad-path": hostile},
    )
    html = html_of(tmp_path, rec)
    assert hostile not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "404 &lt;b&gt;not found&lt;/b&gt;" in html


def test_the_page_is_self_contained_and_says_how_it_was_generated(tmp_path: Path) -> None:
    html = html_of(
        tmp_path, recording(tmp_path, "llamacpp-b10434", [probe("chat-logprobs", "supported", "20")])
    )
    assert html.startswith(f"<!DOCTYPE html>\n<!-- Generated by `{COMMAND}` from tests/fixtures/providers.")
    assert f"Generated by <code>{COMMAND}</code>" in html
    assert "<style>" in html
    assert "<script>" in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "<link" not in html
    assert "@import" not in html


def test_rendering_twice_gives_identical_bytes_dated_only_by_the_recording(tmp_path: Path) -> None:
    recs = [
        recording(tmp_path, "llamacpp-b10434", [probe("chat-logprobs", "supported", "20")]),
        recording(tmp_path, "vllm-0.32.0", [probe("chat-logprobs", "refused", "400")]),
    ]
    first = html_of(tmp_path, *recs)
    assert first == html_of(tmp_path, *reversed(recs))
    assert set(re.findall(r"\d{4}-\d\d-\d\d", first)) == {"2026-11-29"}
    assert not re.search(r"\d\d:\d\d:\d\d", first)


def test_a_probe_outside_the_catalogue_is_refused_by_naming_it(tmp_path: Path) -> None:
    rec = recording(tmp_path, "llamacpp-b10434", [probe("chat-logprobs", "supported", "20")])
    stray = ProbeResult("chat-telepathy", "chat_completions", "logprobs", 200, "supported", "yes", "", None)
    broken = Recording(**{**rec.__dict__, "probes": (*rec.probes, stray)})
    with pytest.raises(
        PageError, match=r"'chat-telepathy' in llamacpp-b10434: expected a probe of the catalogue"
    ):
        page_of(tmp_path, broken)


def test_an_unreadable_cassette_is_refused_by_naming_the_file(tmp_path: Path) -> None:
    rec = recording(tmp_path, "llamacpp-b10434", [probe("chat-logprobs", "supported", "20")])
    (tmp_path / rec.key / "chat-logprobs.yaml").write_text("interactions: [\n  {request: ", encoding="utf-8")
    with pytest.raises(PageError, match=r"chat-logprobs\.yaml: expected a vcrpy cassette, could not read it"):
        page_of(tmp_path, rec)


def test_a_body_that_is_not_json_is_shown_as_text_cut_to_a_bound(tmp_path: Path) -> None:
    body = "404 page not found " * 100
    probes = [probe("chat-bad-path", "refused", "404", status=404)]
    rec = recording(tmp_path, "llamacpp-b10434", probes, bodies={"chat-bad-path": body})
    excerpt = cell(page_of(tmp_path, rec), rec.key, "chat-bad-path").exchanges[0].response_excerpt
    assert excerpt.startswith("404 page not found 404 page not found")
    assert excerpt.endswith(f"… ({len(body)} characters in all)")
    assert len(excerpt) < 1000


def test_an_unknown_outcome_is_refused_by_listing_the_known_ones(tmp_path: Path) -> None:
    rec = recording(tmp_path, "llamacpp-b10434", [probe("chat-logprobs", "maybe", "20")])
    with pytest.raises(PageError, match=r"expected an outcome among supported.*got 'maybe'"):
        page_of(tmp_path, rec)


def test_report_html_writes_the_page_under_out_with_the_transcribed_columns(tmp_path: Path) -> None:
    layout = Layout.out(tmp_path / "out")
    rec = recording(layout.fixtures_root, "llamacpp-b10434", [probe("chat-logprobs", "supported", "20 alts")])
    rec.save()
    written = write_index(layout)
    assert written == tmp_path / "out" / "reports" / "index.html"
    html = written.read_text(encoding="utf-8")
    assert f"Generated by `{COMMAND} --out {tmp_path / 'out'}` from {layout.fixtures_root}." in html
    assert 'data-key="llamacpp-b10434" data-probe="chat-logprobs" data-kind="supported"' in html
    assert 'data-key="ollama-0.34.3-reference"' in html
    assert "POST /v1/chat/completions" in html


def test_the_committed_page_is_what_the_committed_fixtures_regenerate() -> None:
    committed = repository_root() / "reports" / "index.html"
    assert committed.is_file(), f"expected {committed}: run `{COMMAND}`"
    assert committed.read_text(encoding="utf-8") == render_layout(Layout.repository()), (
        f"reports/index.html drifted from tests/fixtures/providers: run `{COMMAND}` and commit the result"
    )


def test_the_report_command_writes_the_page_with_every_other_generated_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jevper.probe.cli import main

    layout = Layout.out(tmp_path)
    rec = recording(layout.fixtures_root, "llamacpp-b10434", [probe("chat-logprobs", "supported", "20 alts")])
    rec.save()
    assert main(["report", "--out", str(tmp_path)]) == 0
    assert f"generated {tmp_path / 'reports' / 'index.html'}" in capsys.readouterr().out
    assert "20 alts" in (tmp_path / "reports" / "index.html").read_text(encoding="utf-8")


def test_a_probe_added_since_a_recording_does_not_bring_back_a_route_it_answered_404_to() -> None:
    # llama.cpp b11434 answered 404 to every Decisions probe it was asked; the Decisions stability
    # probes came later and it holds none of them.
    recording = Layout.repository().load("llamacpp-b11434")
    decisions = [p for p in CATALOGUE.probes if p.surface == "decisions"]
    assert any(recording.result(p.id) is None for p in decisions)
    assert "decisions" not in served(recording, CATALOGUE)
