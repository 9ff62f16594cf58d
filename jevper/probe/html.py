"""The capability page: one self-contained HTML file built from the results indexes and cassettes.

Rows are probes grouped by topic, columns are recordings (a server at one release, recorded live or
transcribed from the reference document). Each cell carries the verdict, an outcome class with a text
marker, and the evidence read from the probe's cassette, so the page never needs the network.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jinja2
from vcr.serialize import deserialize
from vcr.serializers import yamlserializer

__all__ = [
    "COMMAND",
    "Cell",
    "Column",
    "Exchange",
    "Page",
    "Recording",
    "build_page",
    "render_index",
    "write_index",
]

COMMAND = "python -m jevper.probe report --html"

SURFACES = {"chat_completions": "Chat Completions", "responses": "Responses", "messages": "Messages"}
SERVER_NAMES = {
    "llamacpp": "llama.cpp",
    "vllm": "vLLM",
    "sglang": "SGLang",
    "ollama": "ollama",
    "lmstudio": "LM Studio",
}
# kind -> (marker, words); the marker and words carry the meaning so colour is never the only signal.
KINDS: dict[str, tuple[str, str]] = {
    "supported": ("✓", "supported"),
    "refused": ("✕", "refused"),
    "ignored": ("∅", "ignored"),
    "info": ("\u2139", "information"),  # INFORMATION SOURCE
    "differs": ("≠", "differs from the reference"),
    "fault": ("⚠", "fault or timeout"),
    "not-recorded": ("\u2013", "not recorded"),  # EN DASH
}
# Bounds on what a cell's evidence shows of a cassette; enough to judge the verdict, small enough that
# 45 probes x several recordings stay a page of a few hundred kilobytes.
MAX_EXCHANGES = 3
MAX_STRING = 160
MAX_ITEMS = 5
MAX_DEPTH = 10
MAX_LINES = 60
ONE_LINE = 100
MAX_TEXT = 900


class PageError(ValueError):
    """A results index the page cannot be built from; says which field was expected and what arrived."""


@dataclass(frozen=True)
class Recording:
    """One column's input: a results index (format 1) and the folder holding its cassettes."""

    index: Mapping[str, Any]
    cassettes: Path | None


@dataclass(frozen=True)
class Column:
    key: str
    server: str
    server_name: str
    release: str
    model: str
    model_name: str
    provenance: str
    recorded_on: str
    command: str
    counts: tuple[tuple[str, str, str, int], ...]  # (kind, marker, words, cells of that kind)


@dataclass(frozen=True)
class Exchange:
    """One request/response pair from a cassette, summarised for a reader."""

    request_line: str
    request_body: str
    status: str
    response_excerpt: str


@dataclass(frozen=True)
class Cell:
    id: str
    key: str
    probe_id: str
    kind: str
    marker: str
    kind_words: str
    outcome: str
    verdict: str
    status: str
    evidence: str
    elapsed_s: float | None
    reference: str | None
    agrees_with_reference: bool | None
    changed_from: tuple[str, str] | None  # (earlier release, its verdict) when the verdict changed
    exchanges: tuple[Exchange, ...]


@dataclass(frozen=True)
class Row:
    probe_id: str
    surface: str
    surface_name: str
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class Group:
    topic: str
    title: str
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Page:
    command: str
    source: str
    columns: tuple[Column, ...]
    groups: tuple[Group, ...]
    surfaces: tuple[tuple[str, str], ...]
    kinds: tuple[tuple[str, str, str], ...]
    probe_count: int


def build_page(
    recordings: Iterable[Recording],
    *,
    source: str,
    command: str = COMMAND,
    catalogue: Sequence[tuple[str, str, str]] = (),
    topics: Mapping[str, str] | None = None,
) -> Page:
    """Arrange recordings into the page's grid; the order depends only on the data (deterministic).

    `catalogue` lists (probe id, surface, topic) in report order, so a probe no recording has still
    gets its row; `topics` maps topic ids to titles in the order the matrices appear.
    """
    indexed = sorted(recordings, key=lambda r: _column_order(r.index))
    columns = [_column(r.index) for r in indexed]
    probes = _probe_order(r.index for r in indexed)
    if catalogue:
        known = {p[0] for p in catalogue}
        probes = [*catalogue, *(p for p in probes if p[0] not in known)]
    titles = dict(topics or {})
    rank = {t: i for i, t in enumerate(titles)}
    probes.sort(key=lambda p: rank.get(p[2], len(rank)))  # stable: catalogue order within a topic
    by_key = {c.key: {p["id"]: p for p in _probes(r.index)} for c, r in zip(columns, indexed, strict=True)}
    previous = _previous_release(columns)

    groups: dict[str, list[Row]] = {}
    for probe_id, surface, topic in probes:
        cells = []
        for column, recording in zip(columns, indexed, strict=True):
            result = by_key[column.key].get(probe_id)
            earlier = previous.get(column.key)
            changed_from = None
            if earlier is not None and result is not None:
                before = by_key[earlier.key].get(probe_id)
                if (
                    before is not None
                    and _recorded(before)
                    and _recorded(result)
                    and before["verdict"] != result["verdict"]
                ):
                    changed_from = (earlier.release, str(before["verdict"]))
            cells.append(_cell(column.key, probe_id, result, recording.cassettes, changed_from))
        groups.setdefault(topic, []).append(
            Row(probe_id, surface, SURFACES.get(surface, surface), tuple(cells))
        )

    counted = tuple(
        replace(c, counts=_counts(row.cells[i] for rows in groups.values() for row in rows))
        for i, c in enumerate(columns)
    )
    return Page(
        command=command,
        source=source,
        columns=counted,
        groups=tuple(Group(t, titles.get(t) or _topic_title(t), tuple(rows)) for t, rows in groups.items()),
        surfaces=tuple(SURFACES.items()),
        kinds=tuple((k, m, w) for k, (m, w) in KINDS.items()),
        probe_count=len(probes),
    )


def render_index(
    recordings: Iterable[Recording],
    *,
    source: str,
    command: str = COMMAND,
    catalogue: Sequence[tuple[str, str, str]] = (),
    topics: Mapping[str, str] | None = None,
) -> str:
    """The page as one HTML string with its CSS and JS inline."""
    page = build_page(recordings, source=source, command=command, catalogue=catalogue, topics=topics)
    return _environment().get_template("index.html.j2").render(page=page)


def write_index(recordings: Iterable[Recording], out: Path, *, source: str, **options: Any) -> Path:
    """Render and write the page; returns the path written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_index(recordings, source=source, **options), encoding="utf-8")
    return out


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("jevper.probe", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env


def _probes(index: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    probes = index.get("probes")
    if not isinstance(probes, list):
        raise PageError(f"results index {index.get('key')!r}: expected a 'probes' list, got {probes!r:.80}")
    return probes


def _field(index: Mapping[str, Any], name: str) -> str:
    value = index.get(name)
    if not isinstance(value, str) or not value:
        raise PageError(f"results index {index.get('key')!r}: expected a string {name!r}, got {value!r:.80}")
    return value


def _natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders b9999 before b10434 and 0.9 before 0.32."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part)


def _column_order(index: Mapping[str, Any]) -> tuple[Any, ...]:
    transcribed = index.get("provenance") == "transcribed"
    return (_field(index, "server"), transcribed, _natural(str(index.get("release", ""))), index.get("key"))


def _column(index: Mapping[str, Any]) -> Column:
    provenance = _field(index, "provenance")
    if provenance not in ("recorded", "transcribed"):
        raise PageError(
            f"results index {index.get('key')!r}: expected provenance 'recorded' or 'transcribed', "
            f"got {provenance!r}"
        )
    server = _field(index, "server")
    return Column(
        key=_field(index, "key"),
        server=server,
        server_name=SERVER_NAMES.get(server, server),
        release=_field(index, "release"),
        model=str(index.get("model") or ""),
        model_name=str(index.get("model_name") or ""),
        provenance=provenance,
        recorded_on=str(index.get("recorded_on") or ""),
        command=str(index.get("command") or ""),
        counts=(),
    )


def _probe_order(indexes: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """Probes in the order the recordings list them (the catalogue's), first appearance wins."""
    seen: dict[str, tuple[str, str, str]] = {}
    for index in indexes:
        for probe in _probes(index):
            pid = probe.get("id")
            if not isinstance(pid, str):
                raise PageError(f"results index {index.get('key')!r}: expected a probe 'id', got {pid!r}")
            seen.setdefault(pid, (pid, str(probe.get("surface", "")), str(probe.get("topic", ""))))
    return list(seen.values())


def _previous_release(columns: Sequence[Column]) -> dict[str, Column]:
    """Each recorded column mapped to the recorded release of the same server just before it."""
    previous: dict[str, Column] = {}
    last: dict[str, Column] = {}
    for column in columns:
        if column.provenance != "recorded":
            continue
        if column.server in last:
            previous[column.key] = last[column.server]
        last[column.server] = column
    return previous


def _recorded(result: Mapping[str, Any]) -> bool:
    return result.get("outcome") != "not-run"


def _kind(result: Mapping[str, Any] | None) -> str:
    if result is None or not _recorded(result):
        return "not-recorded"
    outcome = result.get("outcome")
    if outcome in ("fault", "timeout"):
        return "fault"
    if result.get("agrees_with_reference") is False:
        return "differs"
    if outcome in ("supported", "refused", "ignored", "info"):
        return str(outcome)
    raise PageError(
        f"probe {result.get('id')!r}: expected an outcome among supported, ignored, refused, info, "
        f"fault, timeout, not-run; got {outcome!r}"
    )


def _cell(
    key: str,
    probe_id: str,
    result: Mapping[str, Any] | None,
    cassettes: Path | None,
    changed_from: tuple[str, str] | None,
) -> Cell:
    kind = _kind(result)
    marker, words = KINDS[kind]
    found = result or {}
    status = found.get("status")
    elapsed = found.get("elapsed_s")
    exchanges: tuple[Exchange, ...] = ()
    if result is not None and cassettes is not None:
        exchanges = _exchanges(cassettes / f"{probe_id}.yaml")
    return Cell(
        id=f"{key}--{probe_id}",
        key=key,
        probe_id=probe_id,
        kind=kind,
        marker=marker,
        kind_words=words,
        outcome=str(found.get("outcome", "not recorded")),
        verdict=str(found.get("verdict") or "not recorded"),
        status="no response" if status is None else str(status),
        evidence=str(found.get("evidence") or ""),
        elapsed_s=float(elapsed) if isinstance(elapsed, int | float) else None,
        reference=found.get("reference"),
        agrees_with_reference=found.get("agrees_with_reference"),
        changed_from=changed_from,
        exchanges=exchanges,
    )


def _counts(cells: Iterable[Cell]) -> tuple[tuple[str, str, str, int], ...]:
    tally = dict.fromkeys(KINDS, 0)
    for cell in cells:
        tally[cell.kind] += 1
    return tuple((kind, *KINDS[kind], n) for kind, n in tally.items() if n)


def _topic_title(topic: str) -> str:
    words = topic.replace("_", " ").replace("-", " ").strip()
    return (words[:1].upper() + words[1:]) if words else "Other"


def _exchanges(path: Path) -> tuple[Exchange, ...]:
    """The first few interactions of a cassette, pruned for reading; none when the file is absent."""
    if not path.is_file():
        return ()
    try:
        loaded = deserialize(path.read_text(encoding="utf-8"), yamlserializer)
    except (ValueError, KeyError, TypeError) as error:
        raise PageError(
            f"cassette {path.name}: expected a vcrpy cassette, could not read it ({error})"
        ) from None
    requests, responses = loaded[0], loaded[1]
    out = []
    for request, response in list(zip(requests, responses, strict=False))[:MAX_EXCHANGES]:
        url = urlsplit(request.uri)
        line = f"{request.method} {url.path}" + (f"?{url.query}" if url.query else "")
        code = response.get("status", {}).get("code")
        message = response.get("status", {}).get("message") or ""
        out.append(
            Exchange(
                request_line=line,
                request_body=_excerpt(request.body),
                status=f"{code} {message}".strip(),
                response_excerpt=_excerpt(response.get("body", {}).get("string")),
            )
        )
    return tuple(out)


def _excerpt(body: bytes | str | None) -> str:
    """A body made short: JSON pruned (long strings cut, long lists elided), other text truncated."""
    if body is None:
        return ""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else str(body)
    if not text.strip():
        return "(empty body)"
    try:
        value = json.loads(text)
    except ValueError:
        return text if len(text) <= MAX_TEXT else f"{text[:MAX_TEXT]}… ({len(text)} characters in all)"
    lines = _dump(_prune(value, MAX_DEPTH)).splitlines()
    if len(lines) > MAX_LINES:
        lines = [*lines[:MAX_LINES], f"… ({len(lines) - MAX_LINES} more lines)"]
    return "\n".join(lines)


def _dump(value: Any, indent: str = "") -> str:
    """JSON with one item per line, except that a small object or list stays on one line."""
    flat = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, dict | list) or len(flat) + len(indent) <= ONE_LINE or not value:
        return flat
    inner = indent + "  "
    if isinstance(value, list):
        items = [inner + _dump(v, inner) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    pairs = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_dump(v, inner)}" for k, v in value.items()]
    return "{\n" + ",\n".join(pairs) + "\n" + indent + "}"


def _prune(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= MAX_STRING else f"{value[:MAX_STRING]}… ({len(value)} characters)"
    if isinstance(value, list):
        if depth == 0:
            return f"[… {len(value)} items]"
        kept = [_prune(v, depth - 1) for v in value[:MAX_ITEMS]]
        return kept + ([f"… {len(value) - MAX_ITEMS} more"] if len(value) > MAX_ITEMS else [])
    if isinstance(value, dict):
        if depth == 0:
            return "{…}"
        return {str(k): _prune(v, depth - 1) for k, v in value.items()}
    return value
