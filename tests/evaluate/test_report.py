"""report.html holds one reliability diagram and one coverage curve per question, and fetches nothing."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

from _answers import QUESTIONS, TICKETS, answers, labelled, write

from jevper.evaluate.cli import main


class Page(HTMLParser):
    """The page's SVG classes and every attribute value and style text that could name a resource."""

    def __init__(self) -> None:
        super().__init__()
        self.svgs: list[str] = []
        self.tags: set[str] = set()
        self.values: list[str] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        found = dict(attrs)
        if tag == "svg":
            self.svgs.append(found.get("class") or "")
        self.values += [v for _, v in attrs if v]
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


def page(tmp_path: Path, *extra: str) -> Page:
    # The first 60 tickets: the page's plots and what it links do not depend on the row count, and 60 are
    # fit in a quarter of the 240's time.
    rows = labelled()[:60]
    tickets = tmp_path / "tickets.csv"
    tickets.write_text("".join(TICKETS.read_text(encoding="utf-8").splitlines(keepends=True)[:61]))
    answered = write(tmp_path / "answers.jsonl", [r["id"] for r in rows], answers(rows))
    out = tmp_path / "out"
    argv = [str(tickets), "--questions", str(QUESTIONS), "--answers", str(answered), "--out", str(out)]
    assert main([*argv, *extra]) == 0
    parsed = Page()
    parsed.feed((out / "report.html").read_text(encoding="utf-8"))
    return parsed


def test_the_report_draws_one_reliability_diagram_and_one_coverage_curve_per_question(tmp_path: Path) -> None:
    parsed = page(tmp_path, "--fit", "--server", "k", "--release", "r", "--model", "m",
                  "--method", "logprobs", "--api", "chat_completions")  # fmt: skip
    questions = len(json.loads(QUESTIONS.read_text()))
    assert parsed.svgs.count("reliability") == questions
    assert parsed.svgs.count("coverage") == questions
    assert len(parsed.svgs) == 2 * questions


def test_the_report_fetches_nothing_from_anywhere(tmp_path: Path) -> None:
    parsed = page(tmp_path)
    assert not parsed.tags & {"script", "link", "img", "iframe", "object", "embed", "image", "use"}
    assert not [v for v in parsed.values if re.search(r"(https?:|//|data:)", v)]
    assert not [s for s in parsed.styles if re.search(r"url\(|@import", s)]
