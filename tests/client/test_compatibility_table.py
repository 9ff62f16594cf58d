"""docs/compatibility.md, read as data: every documented name has a row, a name the row says we export is
in ``jevper.__all__`` and means a value of ours, and a name we do not carry says what to use instead.

With ``JEVPER_DOCUMENTED_PYTHON`` set to the python of an environment holding the published ``jevper``
0.7.12 (``pip install jevper==0.7.12`` in a venv of its own), the table's names are also checked against
that library's ``__all__``, read by running it."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import jevper

PAGE = Path(__file__).parents[2] / "docs" / "compatibility.md"
ROW = re.compile(r"^\| `(?P<documented>[A-Za-z_]+)` \| (?P<ours>[^|]+) \| (?P<difference>[^|]+) \|$")
NOT_CARRIED = "not carried"


def rows() -> list[tuple[str, str, str]]:
    found = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        matched = ROW.match(line)
        if matched:
            found.append((matched["documented"], matched["ours"].strip(), matched["difference"].strip()))
    return found


def test_the_table_lists_each_documented_name_once_in_order() -> None:
    names = [documented for documented, _, _ in rows()]
    assert len(names) >= 50  # the documented API exports 54 names
    assert len(set(names)) == len(names) and names == sorted(names)


@pytest.mark.parametrize("row", rows(), ids=lambda row: row[0])
def test_each_name_we_carry_is_exported_and_each_we_do_not_says_what_to_use(
    row: tuple[str, str, str],
) -> None:
    documented, ours, difference = row
    if ours == NOT_CARRIED:
        assert documented not in jevper.__all__
        assert difference != "—" and "`" in difference  # names what to use instead
        return
    name = ours.strip("`")
    assert name == documented and name in jevper.__all__
    assert getattr(jevper, name) is not None


@pytest.mark.skipif(
    not os.environ.get("JEVPER_DOCUMENTED_PYTHON"),
    reason="opt in: JEVPER_DOCUMENTED_PYTHON=<python of a venv>",
)
def test_the_table_holds_exactly_the_documented_librarys_exported_names() -> None:
    python = os.environ["JEVPER_DOCUMENTED_PYTHON"]
    program = (
        "import json, jevper; print(json.dumps(sorted(n for n in jevper.__all__ if n != '__version__')))"
    )
    published = json.loads(
        subprocess.run([python, "-I", "-c", program], check=True, capture_output=True, text=True).stdout
    )
    assert sorted(documented for documented, _, _ in rows()) == published
