"""The evaluation refuses an answer that is no distribution (a probability outside [0, 1], NaN, a cell
that is neither a mapping nor a list of pairs), naming the row and the question, with status 2: it never
scores one, and never crashes on one."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from _answers import QUESTIONS, TICKETS, answers, labelled, write

from jevper.evaluate.cli import main

TEAM = '{"billing": 0.1, "technical": 0.7, "shipping": 0.1, "account": 0.1}'


def answers_with(tmp_path: Path, column: str, cell: str) -> Path:
    """The batch's CSV answers to the tickets, with ``column`` of row t002 set to ``cell``."""
    rows = labelled()
    path = write(tmp_path / "answers.csv", [r["id"] for r in rows], answers(rows))
    with path.open(newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    table[1][column] = cell
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=list(table[0]), quoting=csv.QUOTE_ALL)
        out.writeheader()
        out.writerows(table)
    return path


@pytest.mark.parametrize(
    ("column", "cell", "said"),
    [
        ("team.probabilities", TEAM.replace("0.7", "1.7"), "'technical': 1.7"),
        ("team.probabilities", TEAM.replace("0.1,", "-0.3,", 1), "'billing': -0.3"),
        ("team.probabilities", TEAM.replace("0.7", "NaN"), "'technical': nan"),
        ("team.probabilities", TEAM.replace("0.7", "Infinity"), "'technical': inf"),
        ("team.probabilities", "[0.1, 0.7, 0.1, 0.1]", "a mapping of each option to its probability"),
        ("team.probabilities", "0.7", "a mapping of each option to its probability"),
        ("team.probabilities", '{"billing": "high"}', "'billing': 'high'"),
        ("team.probabilities", '{"billing": 0, "technical": 0}', "a positive sum"),
        ("angry.noul", "1.5", "got 1.5"),
        ("angry.noul", "-0.2", "got -0.2"),
        ("angry.noul", "nan", "got nan"),
        ("urgency.probabilities", '{"0": 0.5, "1": 2.5, "2": 0.0, "3": 0.0}', "'1': 2.5"),
    ],
)
def test_an_answer_that_is_no_distribution_is_refused_naming_the_row_and_question(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, cell: str, said: str
) -> None:
    path = answers_with(tmp_path, column, cell)
    argv = [
        str(TICKETS),
        "--questions",
        str(QUESTIONS),
        "--answers",
        str(path),
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    qid = column.split(".")[0]
    assert f"ANSWERS {path}, row 't002', question {qid!r}: expected " in err, err
    assert said in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_a_list_of_pairs_as_arrow_holds_a_map_is_read_as_its_mapping(tmp_path: Path) -> None:
    pairs = '[["billing", 0.1], ["technical", 0.7], ["shipping", 0.1], ["account", 0.1]]'
    path = answers_with(tmp_path, "team.probabilities", pairs)
    argv = [
        str(TICKETS),
        "--questions",
        str(QUESTIONS),
        "--answers",
        str(path),
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 0
