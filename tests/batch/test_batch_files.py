"""The local engine's input files read as the tables they hold: CSV quoting and encodings."""

from __future__ import annotations

from pathlib import Path

from jevper.batch._files import Input


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
