"""Every relative link of the README, CONTRIBUTING.md and docs/*.md reaches a file that exists, and a link
to a heading of a Markdown page reaches a heading that page has (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    lines = page.read_text(encoding="utf-8").splitlines()
    return {anchor(line.lstrip("#")) for line in lines if re.match(r"#{1,6} ", line)}


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_anchor_rule_is_github_s() -> None:
    assert anchor(" The figures (`eval/metrics.json`)") == "the-figures-evalmetricsjson"
    assert anchor(" `python -m jevper.probe record`") == "python--m-jevperprobe-record"


def test_every_relative_link_of_the_docs_reaches_a_file_and_a_heading() -> None:
    broken = []
    for page in pages():
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # a URL: not checked offline
            path, _, fragment = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == [], f"expected every link to reach its target, got {broken}"
