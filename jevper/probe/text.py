"""Text the harness writes: "expected … / actual …" sentences, evidence excerpts, table cells."""

from __future__ import annotations

import json
from typing import Any

EXCERPT = 240


def expected_actual(expected: str, actual: str) -> str:
    return f"expected {expected} / actual {actual}"


def excerpt(value: Any, limit: int = EXCERPT) -> str:
    """A one-line excerpt of a body or value, cut at `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def words(message: str, limit: int = 120) -> str:
    """The server's own words, quoted and cut short."""
    return json.dumps(excerpt(message, limit), ensure_ascii=False)


def plural(count: int, noun: str) -> str:
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun[:-1]}ies" if noun.endswith("y") else f"{count} {noun}s"


def table_cell(text: str, limit: int) -> str:
    """One line of a Markdown table cell: whitespace collapsed, pipes escaped, cut at `limit`."""
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"
