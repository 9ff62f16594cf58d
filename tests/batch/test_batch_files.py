"""The local engine's input files read as the tables they hold (CSV quoting, encodings and headers), and
the questions file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jevper.batch._core import as_questions
from jevper.batch._files import Input, InputError
from jevper.batch.cli import questions_of


def rows_of(path: Path) -> list[dict[str, str]]:
    return [row for batch in Input(path).batches(1000) for row in batch.to_pylist()]


def test_a_quoted_csv_cell_spanning_lines_is_read_across_the_readers_blocks(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    note = "a line of the note\n" * 60_000  # over a mebibyte, the reader's block
    path.write_text(f'id,state,note\n1,"first\nsecond","{note}"\n2,"a ""quoted""\r\nword",\n', newline="")
    assert Input(path).check("id").rows == 2
    assert rows_of(path) == [
        {"id": "1", "state": "first\nsecond", "note": note},
        {"id": "2", "state": 'a "quoted"\r\nword', "note": ""},
    ]


def test_a_csv_starting_with_a_utf8_bom_names_its_first_column_without_it(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b"\xef\xbb\xbfid,state\n1,plain\n")
    assert Input(path).check("id").schema.names == ["id", "state"]
    assert rows_of(path) == [{"id": "1", "state": "plain"}]


def test_a_csv_header_naming_a_column_twice_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,state,note,state\n1,first,a,second\n")
    with pytest.raises(InputError, match=r"column 'state' twice .*columns 2 and 4"):
        Input(path).check("id")


def test_a_question_whose_id_is_questions_is_a_question_not_a_wrapper(tmp_path: Path) -> None:
    urgent = {"type": "noul", "instructions": "Is it urgent?"}
    angry = {"type": "noul", "instructions": "Is the writer angry?"}
    path = tmp_path / "questions.json"
    path.write_text(json.dumps({"questions": urgent, "angry": angry}))
    assert questions_of(path) == {"questions": urgent, "angry": angry}
    path.write_text(json.dumps({"questions": urgent}))
    assert questions_of(path) == {"questions": urgent}
    assert [qid for qid, _ in as_questions({"questions": urgent})] == ["questions"]
    # A System One request's questions object, whole, is still read as the questions it wraps.
    path.write_text(json.dumps({"model": "m", "questions": {"urgent": urgent}}))
    assert questions_of(path) == {"urgent": urgent}
    assert [qid for qid, _ in as_questions({"questions": {"urgent": urgent}})] == ["urgent"]
