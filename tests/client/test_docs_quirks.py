"""The quirk table in docs/surfaces.md names tests; each must exist, so the table cannot drift from them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_every_test_the_quirk_table_names_exists_in_the_client_tests() -> None:
    table = (ROOT / "docs" / "surfaces.md").read_text().split("## Server quirks", 1)[1]
    named = set(re.findall(r"`(test_\w+)`", table))
    defined = {
        name
        for module in (ROOT / "tests" / "client").glob("test_*.py")
        for name in re.findall(r"^def (test_\w+)\(", module.read_text(), re.MULTILINE)
    }
    assert len(named) >= 20
    assert sorted(named - defined) == []
