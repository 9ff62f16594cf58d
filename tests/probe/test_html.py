"""The capability page's content, checked offline on small results indexes written for each test."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from vcr.request import Request
from vcr.serialize import serialize
from vcr.serializers import yamlserializer

from jevper.probe.html import Page, PageError, Recording, build_page, render_index


def probe(pid: str, outcome: str, verdict: str, **extra: Any) -> dict[str, Any]:
    surface = {"chat": "chat_completions", "responses": "responses", "messages": "messages"}[
        pid.split("-")[0]
    ]
    return {
        "id": pid,
        "surface": surface,
        "topic": extra.pop("topic", "logprobs"),
        "status": extra.pop("status", 200),
        "outcome": outcome,
        "verdict": verdict,
        "evidence": extra.pop("evidence", f"evidence of {pid}"),
        "elapsed_s": 0.25,
        "reference": extra.pop("reference", None),
        "agrees_with_reference": extra.pop("agrees_with_reference", None),
        **extra,
    }


def recording(
    root: Path, key: str, probes: list[dict[str, Any]], *, provenance: str = "recorded", bodies: Any = None
) -> Recording:
    server, release = key.split("-", 1)
    folder = root / key
    folder.mkdir(parents=True)
    for p in probes:
        if provenance == "recorded" and p["outcome"] != "not-run":
            body = (bodies or {}).get(p["id"], {"id": "x", "choices": [{"text": p["verdict"]}]})
            write_cassette(
                folder / f"{p['id']}.yaml", {"model": "smollm2", "probe": p["id"]}, p["status"], body
            )
    index = {
        "format": 1,
        "key": key,
        "server": server,
        "release": release.removesuffix("-reference"),
        "model": "smollm2",
        "model_name": "SmolLM2-135M-Instruct (F16)",
        "provenance": provenance,
        "recorded_on": "2026-11-29" if provenance == "recorded" else None,
        "command": f"python -m jevper.probe --server {server}",
        "probes": probes,
    }
    (folder / "results.json").write_text(json.dumps(index), encoding="utf-8")
    return Recording(index, folder)


def write_cassette(path: Path, request: Any, status: int, body: Any) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    data = {
        "requests": [
            Request("POST", "http://127.0.0.1:41234/v1/chat/completions", json.dumps(request).encode(), {})
        ],
        "responses": [{"status": {"code": status, "message": "OK"}, "headers": {}, "body": {"string": text}}],
    }
    path.write_text(serialize(data, yamlserializer), encoding="utf-8")


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
            probe("chat-developer-role", "not-run", "not run"),
        ],
    )
    page = build_page([rec], source="fixtures")
    kinds = {r.probe_id: r.cells[0].kind for g in page.groups for r in g.rows}
    assert kinds == {
        "chat-logprobs": "supported",
        "chat-n-two": "refused",
        "chat-unknown-field": "ignored",
        "chat-cache-key": "info",
        "chat-grammar": "differs",
        "chat-stream-zero": "fault",
        "chat-bad-path": "fault",
        "chat-developer-role": "not-recorded",
    }
    markers = {r.cells[0].kind: r.cells[0].marker for g in page.groups for r in g.rows}
    assert len(set(markers.values())) == len(markers)
    assert cell(page, "llamacpp-b10434", "chat-stream-zero").status == "no response"


def test_a_probe_missing_from_one_recording_is_shown_as_not_recorded(tmp_path: Path) -> None:
    a = recording(tmp_path, "llamacpp-b10434", [probe("chat-logprobs", "supported", "20 alternatives")])
    b = recording(tmp_path, "vllm-0.32.0", [probe("chat-n-two", "supported", "2 choices")])
    page = build_page([a, b], source="fixtures")
    assert cell(page, "vllm-0.32.0", "chat-logprobs").kind == "not-recorded"
    assert cell(page, "vllm-0.32.0", "chat-logprobs").verdict == "not recorded"
    assert cell(page, "llamacpp-b10434", "chat-n-two").kind == "not-recorded"


def test_columns_are_ordered_by_server_then_release_numerically_with_transcribed_last(tmp_path: Path) -> None:
    one = [probe("chat-logprobs", "supported", "yes")]
    recs = [
        recording(tmp_path, "vllm-0.32.0", one),
        recording(tmp_path, "llamacpp-b10434", one),
        recording(tmp_path, "llamacpp-b11139-reference", one, provenance="transcribed"),
        recording(tmp_path, "llamacpp-b9999", one),
    ]
    page = build_page(recs, source="fixtures")
    assert [c.key for c in page.columns] == [
        "llamacpp-b9999",
        "llamacpp-b10434",
        "llamacpp-b11139-reference",
        "vllm-0.32.0",
    ]


def test_the_header_says_where_each_column_came_from(tmp_path: Path) -> None:
    one = [probe("chat-logprobs", "supported", "yes")]
    recs = [
        recording(tmp_path, "llamacpp-b10434", one),
        recording(tmp_path, "ollama-0.34.3-reference", one, provenance="transcribed"),
    ]
    html = render_index(recs, source="tests/fixtures/providers")
    head = html[html.index("<thead>") : html.index("</thead>")]
    assert 'llama.cpp</span> <span class="release">b10434' in head
    assert "recorded live 2026-11-29" in head
    assert "SmolLM2-135M-Instruct (F16)" in head
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
    page = build_page([new, other, old], source="fixtures")
    assert cell(page, "llamacpp-b11434", "chat-n-two").changed_from == ("b10434", "400")
    assert cell(page, "llamacpp-b11434", "chat-n-two").verdict == "2 choices"
    assert cell(page, "llamacpp-b11434", "chat-logprobs").changed_from is None
    assert cell(page, "llamacpp-b10434", "chat-n-two").changed_from is None
    assert cell(page, "vllm-0.32.0", "chat-n-two").changed_from is None
    html = render_index([new, other, old], source="fixtures")
    assert html.count('class="delta"') == 1


def test_rows_follow_the_catalogue_grouped_by_topic_with_their_titles(tmp_path: Path) -> None:
    rec = recording(
        tmp_path,
        "llamacpp-b10434",
        [
            probe("messages-plain", "supported", "text", topic="messages"),
            probe("chat-logprobs", "supported", "20", topic="logprobs"),
        ],
    )
    catalogue = [
        ("chat-bad-path", "chat_completions", "routes"),
        ("chat-logprobs", "chat_completions", "logprobs"),
        ("messages-plain", "messages", "messages"),
    ]
    topics = {"routes": "Surfaces and routes", "logprobs": "Logprobs", "messages": "The Messages route"}
    page = build_page([rec], source="f", catalogue=catalogue, topics=topics)
    assert [(g.title, [r.probe_id for r in g.rows]) for g in page.groups] == [
        ("Surfaces and routes", ["chat-bad-path"]),
        ("Logprobs", ["chat-logprobs"]),
        ("The Messages route", ["messages-plain"]),
    ]
    assert cell(page, "llamacpp-b10434", "chat-bad-path").kind == "not-recorded"


def test_the_evidence_is_read_from_the_cassette_pruned_and_without_the_port(tmp_path: Path) -> None:
    body = {"choices": [{"logprobs": {"content": [{"top_logprobs": list(range(20))}]}}], "text": "x" * 500}
    rec = recording(
        tmp_path,
        "llamacpp-b10434",
        [probe("chat-logprobs", "supported", "20")],
        bodies={"chat-logprobs": body},
    )
    exchange = cell(build_page([rec], source="f"), "llamacpp-b10434", "chat-logprobs").exchanges[0]
    assert exchange.request_line == "POST /v1/chat/completions"
    assert '"probe": "chat-logprobs"' in exchange.request_body
    assert exchange.status == "200 OK"
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
    html = render_index([rec], source="f")
    assert hostile not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "404 &lt;b&gt;not found&lt;/b&gt;" in html


def test_the_page_is_self_contained_and_says_how_it_was_generated(tmp_path: Path) -> None:
    rec = recording(tmp_path, "llamacpp-b10434", [probe("chat-logprobs", "supported", "20")])
    html = render_index([rec], source="tests/fixtures/providers")
    assert html.startswith("<!DOCTYPE html>\n<!-- Generated by `python -m jevper.probe report --html`")
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
    first = render_index(recs, source="f")
    assert first == render_index(list(reversed(recs)), source="f")
    assert set(re.findall(r"\d{4}-\d\d-\d\d", first)) == {"2026-11-29"}
    assert not re.search(r"\d\d:\d\d:\d\d", first)


def test_an_index_without_a_server_is_refused_by_naming_the_field(tmp_path: Path) -> None:
    rec = recording(tmp_path, "llamacpp-b10434", [probe("chat-logprobs", "supported", "20")])
    broken = Recording({**rec.index, "server": None}, rec.cassettes)
    with pytest.raises(PageError, match=r"expected a string 'server', got None"):
        build_page([broken], source="f")


def test_an_unknown_outcome_is_refused_by_listing_the_known_ones(tmp_path: Path) -> None:
    rec = recording(tmp_path, "llamacpp-b10434", [probe("chat-logprobs", "maybe", "20")])
    with pytest.raises(PageError, match=r"expected an outcome among supported.*got 'maybe'"):
        build_page([rec], source="f")
