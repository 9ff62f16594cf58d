"""The capability page: one self-contained HTML file built from the results indexes and cassettes.

Rows are probes grouped by topic, columns are recordings (a server at one release, recorded live or
transcribed from the reference document), ordered by server kind as probes/presets.toml lists them
(the OpenAI-style servers first), then release. Each cell carries the verdict, an outcome class with a
text marker, and the evidence read from the probe's cassette, so the page never needs the network. A
System One server's cell for a prompt surface it does not serve, and refused, is drawn as "not served"
rather than as one more refusal, as is every cell of a surface whose route a recording answered 404 to
every probe of (OpenAI's Decisions route on a server without it); its verdict is still in the evidence.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import jinja2

from jevper._atomic import write_atomically
from jevper.probe.cassettes import CassetteError, Exchange, load_exchanges
from jevper.probe.catalogue import SURFACE_TITLES, Catalogue, load_catalogue
from jevper.probe.diff import same_verdict
from jevper.probe.presets import load_presets
from jevper.probe.recording import Layout, ProbeResult, Recording, repository_root

__all__ = [
    "COMMAND",
    "Cell",
    "Column",
    "Page",
    "PageError",
    "ShownExchange",
    "build_page",
    "order_columns",
    "render_index",
    "render_layout",
    "write_index",
]

COMMAND = "python -m jevper.probe report"

SURFACES: dict[str, str] = {name: title for name, title in SURFACE_TITLES.items()}
# kind -> (marker, words); the marker and words carry the meaning so colour is never the only signal.
KINDS: dict[str, tuple[str, str]] = {
    "fails": ("\u2717", "breaks the API's specification"),  # BALLOT X
    "supported": ("✓", "supported"),
    "refused": ("✕", "refused"),
    "ignored": ("∅", "ignored"),
    "info": ("\u2139", "information"),  # INFORMATION SOURCE
    "differs": ("≠", "differs from the reference"),
    "fault": ("⚠", "fault or timeout"),
    "not-recorded": ("\u2013", "not recorded"),  # EN DASH
    "unserved": ("\u00b7", "not served: a surface this server does not serve, refused as such"),  # MIDDLE DOT
}
# Bounds on what a cell's evidence shows of a cassette; enough to judge the verdict, small enough that
# the catalogue x several recordings stay a page of a few hundred kilobytes.
MAX_EXCHANGES = 3
MAX_STRING = 160
MAX_ITEMS = 5
MAX_DEPTH = 10
MAX_LINES = 60
ONE_LINE = 100
MAX_TEXT = 900


class PageError(ValueError):
    """A recording or cassette the page cannot be built from; says what was expected and what arrived."""


@dataclass(frozen=True)
class Column:
    key: str
    server: str
    server_name: str
    release: str
    model: str
    model_name: str
    provenance: str
    recorded_on: str  # with the dates of later runs that answered some of its probes again
    serves: tuple[str, ...]  # the surfaces its server serves (probes/presets.toml, less routes it 404s)
    source: str  # where a transcribed column's data comes from ("" for a recorded one)
    graded_with: str  # the SDKs whose types graded the answers, with their versions ("" when unsaid)
    counts: tuple[tuple[str, str, str, int], ...]  # (kind, marker, words, cells of that kind)


@dataclass(frozen=True)
class ShownExchange:
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
    exchanges: tuple[ShownExchange, ...]


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
    catalogue: Catalogue,
    *,
    source: str,
    command: str = COMMAND,
) -> Page:
    """Arrange recordings into the page's grid; the order depends only on the data (deterministic).

    Rows follow the catalogue (a probe no recording has still gets its row), grouped by its topics;
    a cell's exchanges are read from its recording's cassette (transcribed columns have none).
    """
    ordered = order_columns(recordings)
    columns = [_column(r, catalogue) for r in ordered]
    by_key = {r.key: {p.id: p for p in r.probes} for r in ordered}
    owner = {r.key: r for r in ordered}
    previous = _previous_release(columns)
    known = {p.id for p in catalogue.probes}
    extra = [p for r in ordered for p in r.probes if p.id not in known]
    if extra:
        raise PageError(
            f"{extra[0].id!r} in {_key_of(extra[0], ordered)}: expected a probe of the catalogue; for a "
            "probe of one's own, pass the file that defines it with --catalogue PATH"
        )

    groups: list[Group] = []
    for topic in catalogue.topics:
        rows = []
        for probe in (p for p in catalogue.probes if p.topic == topic.id):
            cells = []
            for column in columns:
                result = by_key[column.key].get(probe.id)
                earlier = previous.get(column.key)
                before = by_key[earlier.key].get(probe.id) if earlier else None
                changed_from = None
                if earlier and before and _changed(before, result):
                    changed_from = (earlier.release, before.verdict)
                cells.append(
                    _make_cell(column, probe.surface, probe.id, result, owner[column.key], changed_from)
                )
            surface = SURFACES.get(probe.surface, probe.surface)
            rows.append(Row(probe.id, probe.surface, surface, tuple(cells)))
        if rows:
            groups.append(Group(topic.id, topic.title, tuple(rows)))

    counted = tuple(
        replace(c, counts=_counts(row.cells[i] for g in groups for row in g.rows))
        for i, c in enumerate(columns)
    )
    return Page(
        command=command,
        source=source,
        columns=counted,
        groups=tuple(groups),
        surfaces=tuple(SURFACES.items()),
        kinds=tuple((k, m, w) for k, (m, w) in KINDS.items()),
        probe_count=sum(len(g.rows) for g in groups),
    )


def render_index(
    recordings: Iterable[Recording],
    catalogue: Catalogue,
    *,
    source: str,
    command: str = COMMAND,
) -> str:
    """The page as one HTML string with its CSS and JS inline."""
    page = build_page(recordings, catalogue, source=source, command=command)
    return _environment().get_template("index.html.j2").render(page=page)


def render_layout(
    layout: Layout,
    recordings: Sequence[Recording] | None = None,
    catalogue: Catalogue | None = None,
) -> str:
    """The page for the layout's recordings plus the transcribed reference columns.

    The columns are the Markdown matrices' own (`reports.columns`), so both reports always agree; a
    caller that has loaded them already passes them in rather than have them read again.
    """
    if recordings is None:
        from jevper.probe.reports import columns  # reports loads the catalogue and the reference

        recordings = columns(layout)
    command = COMMAND
    if layout.out_dir is not None:  # an --out folder, not the repository
        command = f"{COMMAND} --out {_source(layout.out_dir)}"
    source = _source(layout.fixtures_root)
    catalogue = catalogue or load_catalogue()
    return render_index(recordings, catalogue, source=source, command=command)


def write_index(layout: Layout) -> Path:
    """Write reports/index.html for the layout; returns the path written."""
    out = layout.reports_dir / "index.html"
    write_atomically(out, render_layout(layout))
    return out


def _source(folder: Path) -> str:
    """The fixtures folder as the page names it: relative to the checkout (or the working directory)
    when it lies inside, so the page is the same on every machine."""
    for base in (repository_root(), Path.cwd()):
        with contextlib.suppress(ValueError):
            return folder.resolve().relative_to(base.resolve()).as_posix()
    return folder.as_posix()


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("jevper.probe", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _key_of(result: ProbeResult, recordings: Sequence[Recording]) -> str:
    return next(r.key for r in recordings if result in r.probes)


def _natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders b9999 before b10434 and 0.9 before 0.32."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part)


def order_columns(recordings: Iterable[Recording]) -> list[Recording]:
    """Live recordings first (what was measured here), then the transcribed reference columns; within
    each, by server kind in the order probes/presets.toml lists them (an unknown kind last), then by
    release, numerically. The Markdown matrices and the page share this order."""
    kinds = list(load_presets())

    def order(recording: Recording) -> tuple[Any, ...]:
        rank = kinds.index(recording.server) if recording.server in kinds else len(kinds)
        transcribed = recording.provenance == "transcribed"
        return (transcribed, rank, recording.server, _natural(recording.release), recording.key)

    return sorted(recordings, key=order)


def serves(server: str) -> tuple[str, ...]:
    """The surfaces a server kind serves (all of them for a kind the presets do not know)."""
    preset = load_presets().get(server)
    return tuple(preset.serves) if preset else tuple(SURFACES)


def served(recording: Recording, catalogue: Catalogue) -> tuple[str, ...]:
    """The surfaces a recording's server serves: those of its kind (`serves`), less any surface whose
    every probe in the catalogue the recording answered 404 to, a route this release does not have."""

    # A probe the recording does not hold (added to the catalogue since) says nothing of the route.
    statuses: dict[str, list[int | None]] = {}
    for probe in catalogue.probes:
        result = recording.result(probe.id)
        if result is not None:
            statuses.setdefault(probe.surface, []).append(result.status)
    return tuple(
        surface
        for surface in serves(recording.server)
        if not (statuses.get(surface) and all(status == 404 for status in statuses[surface]))
    )


def unserved(result: ProbeResult | None, surface: str, served: Sequence[str]) -> bool:
    """A probe of a surface the server does not serve, refused there (or not recorded): what a System
    One server does by design, shown as such. An answer there is shown as the answer it is."""
    return surface not in served and (result is None or result.outcome in ("refused", "not-run"))


def _column(recording: Recording, catalogue: Catalogue) -> Column:
    if recording.provenance not in ("recorded", "transcribed"):
        raise PageError(
            f"recording {recording.key!r}: expected provenance 'recorded' or 'transcribed', "
            f"got {recording.provenance!r}"
        )
    return Column(
        key=recording.key,
        server=recording.server,
        server_name=_display_name(recording.server),
        release=recording.release,
        model=recording.model,
        model_name=recording.model_name,
        provenance=recording.provenance,
        recorded_on=recording.recorded_on
        + "".join(f", {len(u.probes)} probes re-run {u.run.recorded_on}" for u in recording.later),
        serves=served(recording, catalogue),
        source=_source_of(recording),
        graded_with=", ".join(f"{name} {version}" for name, version in recording.graded_with.items()),
        counts=(),
    )


def _source_of(recording: Recording) -> str:
    if recording.provenance == "recorded":
        return ""
    if recording.folder is not None:
        return "transcribed from documentation: a test server of ours speaking it, not a recording"
    return "transcribed from the reference"


def _display_name(server: str) -> str:
    preset = load_presets().get(server)
    return preset.display_name if preset else server


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


def _recorded(result: ProbeResult) -> bool:
    return result.outcome != "not-run"


def _changed(before: ProbeResult | None, after: ProbeResult | None) -> bool:
    """Both releases answered the probe and their verdicts differ."""
    if before is None or after is None or not (_recorded(before) and _recorded(after)):
        return False
    return not same_verdict(before, after)


def _kind(result: ProbeResult | None, unserved_here: bool = False) -> str:
    if result is not None and unserved_here and result.outcome == "refused":
        return "unserved"
    if result is None or not _recorded(result):
        return "not-recorded"
    if result.outcome in ("fault", "timeout", "ungraded"):
        return "fault"
    if result.grade == "fail":
        return "fails"
    if result.agrees_with_reference is False:
        return "differs"
    if result.outcome in ("supported", "refused", "ignored", "info"):
        return result.outcome
    raise PageError(
        f"probe {result.id!r}: expected an outcome among supported, ignored, refused, info, "
        f"fault, timeout, not-run; got {result.outcome!r}"
    )


def _make_cell(
    column: Column,
    surface: str,
    probe_id: str,
    result: ProbeResult | None,
    recording: Recording,
    changed_from: tuple[str, str] | None,
) -> Cell:
    kind = _kind(result, unserved(result, surface, column.serves))
    marker, words = KINDS[kind]
    exchanges: tuple[ShownExchange, ...] = ()
    if result is not None and recording.folder is not None:
        exchanges = _exchanges(recording.cassette(probe_id))
    if column.provenance == "transcribed" and recording.folder is None:
        status = "none: transcribed, not recorded"
    else:
        status = "no response" if result is None or result.status is None else str(result.status)
    return Cell(
        id=f"{column.key}--{probe_id}",
        key=column.key,
        probe_id=probe_id,
        kind=kind,
        marker=marker,
        kind_words=words,
        outcome=result.outcome if result else "not recorded",
        verdict=result.verdict if result else "not recorded",
        status=status,
        evidence=result.evidence if result else "",
        elapsed_s=result.elapsed_s if result else None,
        reference=result.reference if result else None,
        agrees_with_reference=result.agrees_with_reference if result else None,
        changed_from=changed_from,
        exchanges=exchanges,
    )


def _counts(cells: Iterable[Cell]) -> tuple[tuple[str, str, str, int], ...]:
    tally = dict.fromkeys(KINDS, 0)
    for cell in cells:
        tally[cell.kind] += 1
    return tuple((kind, *KINDS[kind], n) for kind, n in tally.items() if n)


def _exchanges(path: Path) -> tuple[ShownExchange, ...]:
    """The first few interactions of a cassette, pruned for reading; none when the file is absent."""
    if not path.is_file():
        return ()
    try:
        loaded = load_exchanges(path)
    except CassetteError as error:
        raise PageError(f"cassette {path}: expected a vcrpy cassette, could not read it ({error})") from None
    return tuple(_shown(exchange) for exchange in loaded[:MAX_EXCHANGES])


@functools.lru_cache(maxsize=4096)
def _shown(exchange: Exchange) -> ShownExchange:
    """An exchange as the page shows it, made once per parsed cassette (a page shows each recording's
    cassettes, and a report run renders the page for every layout it writes)."""
    return ShownExchange(
        request_line=f"{exchange.method} {exchange.path}",
        request_body=_excerpt(exchange.request_body),
        status=str(exchange.status),
        response_excerpt=_excerpt(exchange.text),
    )


def _excerpt(body: Any) -> str:
    """A body made short: JSON pruned (long strings cut, long lists elided), other text truncated."""
    if body is None:
        return ""
    if isinstance(body, str):
        if not body.strip():
            return "(empty body)"
        try:
            body = json.loads(body)
        except ValueError:
            return body if len(body) <= MAX_TEXT else f"{body[:MAX_TEXT]}… ({len(body)} characters in all)"
    lines = _dump(_prune(body, MAX_DEPTH)).splitlines()
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
