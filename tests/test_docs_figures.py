"""Figures live in reports/performance.md (written by scripts/bench, with performance.json beside it): a page
that restates one drifts from it, so the README, CONTRIBUTING.md and docs/*.md link to the report instead.

The matching rule: a figure is a number with its unit (ms, s, x, rows/s, requests/s, questions/s, MiB)
as the report prints it, either a figure's own value or a number in its detail line. A page restates it
when it prints a number with the same unit that equals the figure rounded to the page's own decimals
(`1,017 rows/s` for 1017.1, `3.95x` for 3.946), commas and a space before the unit aside. Numbers of
fewer than three significant digits (`2x`, `60 s`, `0.1 ms`) are too common to be anyone's measurement,
and are not matched.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).parents[1]
UNITS = {"ms": "ms", "s": "s", "x": "x", "\u00d7": "x", "rows/s": "rows/s", "requests/s": "requests/s"}
UNITS |= {"questions/s": "questions/s", "MiB": "MiB"}
NUMBER = re.compile(
    r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?\s?(rows/s|requests/s|questions/s|MiB|ms|s|x|\u00d7)(?![\w/])"
)


def numbers(text: str) -> list[tuple[str, Decimal, str]]:
    """Every number printed with a unit: as written, its value, and its unit."""
    found = []
    for match in NUMBER.finditer(text):
        whole, decimals, unit = match.groups()
        found.append(
            (
                match.group(0),
                Decimal(whole.replace(",", "") + (f".{decimals}" if decimals else "")),
                UNITS[unit],
            )
        )
    return found


def report_figures() -> set[tuple[Decimal, str]]:
    sections = json.loads((ROOT / "reports" / "performance.json").read_text(encoding="utf-8"))
    figures: set[tuple[Decimal, str]] = set()
    for section in sections.values():
        for figure in section["figures"]:
            # A figure the run could not measure has no value (None): there is nothing to restate.
            if figure["unit"] in UNITS and isinstance(figure["value"], int | float):
                figures.add((Decimal(str(figure["value"])), UNITS[figure["unit"]]))
            figures.update((value, unit) for _, value, unit in numbers(figure["detail"]))
    return figures


def restated(text: str, figures: set[tuple[Decimal, str]]) -> list[str]:
    found = []
    for written, value, unit in numbers(text):
        digits = str(value).replace(".", "").replace("-", "").lstrip("0")
        if len(digits) < 3:
            continue
        places = -value.as_tuple().exponent  # type: ignore[operator]
        if any(u == unit and round(v, places) == value for v, u in figures):
            found.append(written)
    return found


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_matching_rule_finds_a_figure_as_a_page_would_restate_it() -> None:
    figures = {(Decimal("3.946"), "x"), (Decimal("1017.1"), "rows/s"), (Decimal("0.145"), "ms")}
    text = "a ratio of 3.95x, 1,017 rows/s, 0.145 ms, but not 2x, 0.1 ms, 3.94x nor 1017.1 requests/s"
    assert restated(text, figures) == ["3.95x", "1,017 rows/s", "0.145 ms"]


def test_the_report_holds_figures_to_match() -> None:
    assert len(report_figures()) > 20


def test_no_page_restates_a_figure_of_the_performance_report() -> None:
    figures = report_figures()
    found = {
        f"{page.relative_to(ROOT)}:{number}": restated(line, figures)
        for page in pages()
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
    }
    found = {where: what for where, what in found.items() if what}
    assert found == {}, f"expected links to reports/performance.md, got figures restated: {found}"
