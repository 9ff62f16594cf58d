"""Reports from fixtures alone: per-recording pages, the capability matrices, the docs tables.

Every generated file says it is generated and by which command; a test regenerates them and fails
when the committed copies differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import jinja2
from tabulate import tabulate

from jevper._atomic import write_atomically
from jevper.probe import diff, html, stability_report, summary
from jevper.probe.agreement import RULES
from jevper.probe.catalogue import Catalogue, load_catalogue
from jevper.probe.recording import Layout, ProbeResult, Recording
from jevper.probe.reference import TRANSCRIBED_FROM, load_reference, transcribed_recording
from jevper.probe.text import table_cell

REPORT_COMMAND = "python -m jevper.probe report"
DOCS_BEGIN = "<!-- generated: "
DOCS_END = "<!-- end generated -->"
CELL = 90

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("jevper.probe", "templates"),
    autoescape=False,  # Markdown, not HTML
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


def cell_text(text: str, limit: int = CELL) -> str:
    return table_cell(text, limit)


def columns(layout: Layout) -> list[Recording]:
    """Recorded columns first, then the transcribed reference columns; each by server kind (as
    probes/presets.toml orders them) and release (`html.order_columns`)."""
    # A transcribed fixture (cassettes from a test server speaking a documented dialect) is a column too.
    kept = list(layout.recordings())
    transcribed = [transcribed_recording(ref) for ref in load_reference().values()]
    return html.order_columns(kept + transcribed)


def provenance_line(recording: Recording) -> str:
    if recording.provenance == "recorded":
        later = "".join(
            f"; {', '.join(f'`{p}`' for p in later.probes)} re-run on {later.run.recorded_on}"
            for later in recording.later
        )
        return (
            f"`{recording.key}`: recorded live ({recording.server} {recording.release}, "
            f"{recording.model_name}, {recording.recorded_on}{later}){graded_with(recording)}"
        )
    if recording.folder is not None:  # a transcribed fixture: its provenance says what it stands for
        return f"`{recording.key}`: {recording.how}{graded_with(recording)}"
    return (
        f"`{recording.key}`: {TRANSCRIBED_FROM} ({recording.server} {recording.release}, {recording.model})"
    )


def graded_with(recording: Recording) -> str:
    """ "; graded with openai 3.63.0, ..." for a recording whose index names the SDKs that graded it."""
    if not recording.graded_with:
        return ""
    return "; graded with " + ", ".join(
        f"{name} {version}" for name, version in recording.graded_with.items()
    )


def _column_title(recording: Recording) -> str:
    suffix = "" if recording.provenance == "recorded" else " (transcribed)"
    return f"{recording.server} {recording.release}{suffix}"


def unserved_columns(topic_id: str, recordings: Sequence[Recording], catalogue: Catalogue) -> list[Recording]:
    """The recordings of servers that serve none of the topic's probes, and refused every one of them
    (a System One server on the chat surfaces, a server without the Decisions route on it): their column
    in the topic's table would be a wall of expected refusals."""
    probes = [p for p in catalogue.probes if p.topic == topic_id]

    def refused_all(r: Recording) -> bool:
        served = html.served(r, catalogue)
        return all(html.unserved(r.result(p.id), p.surface, served) for p in probes)

    return [
        r
        for r in recordings
        if probes
        and (
            refused_all(r)
            # A transcribed fixture covers one route: a topic it holds nothing of is no column of it.
            or (
                r.provenance == "transcribed"
                and r.folder is not None
                and not any(r.result(p.id) for p in probes)
            )
        )
    ]


def _graded(result: ProbeResult) -> str:
    text = cell_text(result.verdict)
    return f"**fails the API**: {text}" if result.grade == "fail" else text


def topic_table(
    topic_id: str, recordings: Sequence[Recording], catalogue: Catalogue, *, link: bool = True
) -> str:
    hidden = {r.key for r in unserved_columns(topic_id, recordings, catalogue)}
    recordings = [r for r in recordings if r.key not in hidden]
    headers = ["probe", *(_column_title(r) for r in recordings)]
    rows = []
    for probe in catalogue.probes:
        if probe.topic != topic_id:
            continue
        row = [f"`{probe.id}`"]
        for recording in recordings:
            result = recording.result(probe.id)
            if result is None:
                row.append("not recorded")
                continue
            text = _graded(result)
            if link and recording.provenance == "recorded":
                text = f"{text} ([evidence]({recording.key}.md#{probe.id}))"
            elif recording.provenance == "transcribed" and result.outcome == "not-run":
                text = "—"
            row.append(text)
        rows.append(row)
    return str(tabulate(rows, headers=headers, tablefmt="github"))


def render_recording(recording: Recording, catalogue: Catalogue) -> str:
    return _ENV.get_template("recording.md.j2").render(
        recording=recording,
        probes=catalogue.probes,
        command=REPORT_COMMAND,
        provenance=provenance_line(recording),
        cell=cell_text,
        rules=RULES,
    )


def _not_shown(topic_id: str, recordings: Sequence[Recording], catalogue: Catalogue) -> str:
    hidden = unserved_columns(topic_id, recordings, catalogue)
    fixtures = [r for r in hidden if r.provenance == "transcribed" and r.folder is not None]
    servers = [r for r in hidden if r not in fixtures]
    said = []
    if servers:
        names = ", ".join(_column_title(r) for r in servers)
        said.append(
            f"Not shown: {names}, which serve none of these probes' surfaces and refused every one "
            "(their own reports list each refusal)."
        )
    if fixtures:
        names = ", ".join(_column_title(r) for r in fixtures)
        said.append(f"{'Nor' if servers else 'Not shown:'} {names}, transcribed for another route.")
    return " ".join(said)


def _tables(
    recordings: Sequence[Recording], catalogue: Catalogue, *, link: bool
) -> list[tuple[str, str, str]]:
    return [
        (
            topic.title,
            topic_table(topic.id, recordings, catalogue, link=link),
            _not_shown(topic.id, recordings, catalogue),
        )
        for topic in catalogue.topics
    ]


def render_capabilities(recordings: Sequence[Recording], catalogue: Catalogue) -> str:
    tables = _tables(recordings, catalogue, link=True)
    return _ENV.get_template("capabilities.md.j2").render(
        tables=tables,
        provenance=[provenance_line(r) for r in recordings],
        command=REPORT_COMMAND,
    )


def render_docs_tables(recordings: Sequence[Recording], catalogue: Catalogue) -> str:
    tables = _tables(recordings, catalogue, link=False)
    return _ENV.get_template("docs-tables.md.j2").render(
        tables=tables, provenance=[provenance_line(r) for r in recordings], command=REPORT_COMMAND
    )


def replace_generated(page: str, generated: str) -> str:
    """The page with the text between the generated markers replaced; prose around it kept."""
    start = page.find(DOCS_BEGIN)
    end = page.find(DOCS_END)
    if start < 0 or end < start:
        raise ValueError(f"expected the markers {DOCS_BEGIN!r}…{DOCS_END!r} in the docs page")
    head_end = page.index("-->", start) + len("-->")
    return page[:head_end] + "\n" + generated.rstrip("\n") + "\n" + page[end:]


def generate(layout: Layout, catalogue: Catalogue | None = None) -> dict[Path, str]:
    """Every generated file the layout's fixtures support, with its content; nothing is written:
    per-recording pages, the matrices, the docs tables, the HTML page, the change reports, and (in the
    repository) the JSON summary's schema. `catalogue` is the built-in one unless a run read more."""
    catalogue = catalogue if catalogue is not None else load_catalogue()
    recordings = columns(layout)
    files: dict[Path, str] = {}
    for recording in recordings:
        if recording.provenance == "recorded":
            files[layout.reports_dir / f"{recording.key}.md"] = render_recording(recording, catalogue)
    files[layout.reports_dir / "capabilities.md"] = render_capabilities(recordings, catalogue)
    if layout.docs_page is not None and layout.docs_page.exists():
        page = layout.docs_page.read_text(encoding="utf-8")
        files[layout.docs_page] = replace_generated(page, render_docs_tables(recordings, catalogue))
    if layout.docs_page is not None and (layout.docs_page.parent / stability_report.PAGE).exists():
        page_path = layout.docs_page.parent / stability_report.PAGE
        table = stability_report.stability_table(recordings, catalogue)
        files[page_path] = replace_generated(page_path.read_text(encoding="utf-8"), table)
    files[layout.reports_dir / "index.html"] = html.render_layout(layout, recordings, catalogue)
    files.update(diff.regenerate(layout))
    if layout.docs_page is not None:
        files[layout.docs_page.parent / "schemas" / summary.SCHEMA_FILE] = summary.schema_text()
    return files


def render_all(layout: Layout, catalogue: Catalogue | None = None) -> list[Path]:
    """Write every generated file; returns the files written."""
    files = generate(layout, catalogue)
    for path, content in files.items():
        if not path.exists() or path.read_text(encoding="utf-8") != content:
            write_atomically(path, content)
    return list(files)


def print_matrix(recording: Recording, catalogue: Catalogue | None = None) -> None:
    """The recording's verdicts, one table per topic, for the terminal."""
    catalogue = catalogue or load_catalogue()
    print(f"\nCapability matrix: {provenance_line(recording)}")
    for topic in catalogue.topics:
        rows = [
            [probe.id, result.outcome, cell_text(result.verdict, 70)]
            for probe in catalogue.probes
            if probe.topic == topic.id and (result := recording.result(probe.id)) is not None
        ]
        if rows:
            print(f"\n{topic.title}")
            print(tabulate(rows, headers=["probe", "outcome", "verdict"], tablefmt="simple"))
