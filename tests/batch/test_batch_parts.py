"""A run's parts folder: files made durable before and after their rename, and the journal's records."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa
import pytest

from jevper.batch._files import Format
from jevper.batch._parts import JournalError, Parts
from jevper.batch._schema import ERROR_TYPE, Row

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("error", ERROR_TYPE)])


def a_batch(*ids: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"id": i, "error": None} for i in ids], schema=SCHEMA)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every fsync (of the path its descriptor names) and rename, in order; a temporary file's random part
    left out (``.out.parquet.1a2b3c4d.tmp`` reads ``.out.parquet.tmp``)."""
    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def plain(path: str) -> str:
        return re.sub(r"\.[0-9a-f]{8}\.tmp\b", ".tmp", path)

    def synced(fd: int) -> None:
        events.append(("fsync", plain(os.readlink(f"/proc/self/fd/{fd}"))))
        fsync(fd)

    def renamed(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(("rename", plain(f"{os.fspath(src)} -> {os.fspath(dst)}")))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", synced)
    monkeypatch.setattr(os, "replace", renamed)
    return events


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_the_finished_output_is_synced_before_its_rename_and_its_folder_after(
    tmp_path: Path, disk: list[tuple[str, str]], fmt: Format
) -> None:
    output = tmp_path / f"out.{fmt}"
    parts = Parts(output)
    parts.start({"version": 1}, resume=False)
    parts.commit(0, a_batch(1, 2))
    disk.clear()
    assert parts.finish(SCHEMA, fmt) == 2
    temporary = tmp_path / f".out.{fmt}.tmp"
    assert disk == [
        ("fsync", str(temporary)),
        ("rename", f"{temporary} -> {output}"),
        ("fsync", str(tmp_path)),
    ]


def test_a_committed_part_and_the_manifest_are_synced_before_their_rename_and_their_folder_after(
    tmp_path: Path, disk: list[tuple[str, str]]
) -> None:
    parts = Parts(tmp_path / "out.parquet")
    parts.start({"version": 1}, resume=False)
    parts.commit(3, a_batch(1))
    folder = parts.folder
    manifest, part = folder / "manifest.json", folder / "part-00000003.arrow"
    assert disk == [
        ("fsync", str(folder / ".manifest.json.tmp")),
        ("rename", f"{folder / '.manifest.json.tmp'} -> {manifest}"),
        ("fsync", str(folder)),
        ("fsync", str(folder / ".part-00000003.arrow.tmp")),
        ("rename", f"{folder / '.part-00000003.arrow.tmp'} -> {part}"),
        ("fsync", str(folder)),
    ]


def test_an_engines_joined_output_is_synced_before_its_rename_and_its_folder_after(
    tmp_path: Path, disk: list[tuple[str, str]]
) -> None:
    import pyarrow.parquet as pq

    from jevper.batch._engine_cli import _join
    from jevper.batch._local import Tally

    (tmp_path / "parts").mkdir()
    pq.write_table(pa.Table.from_batches([a_batch(1, 2)]), tmp_path / "parts" / "part-0.parquet")
    disk.clear()
    _join(tmp_path / "parts", tmp_path / "out.jsonl", Tally())
    partial = tmp_path / ".out.jsonl.tmp"
    assert disk == [
        ("fsync", str(partial)),
        ("rename", f"{partial} -> {tmp_path / 'out.jsonl'}"),
        ("fsync", str(tmp_path)),
    ]


def journal_of(parts: Parts, *ids: int) -> None:
    journal = parts.journal(0)
    for at in ids:
        journal.write(at, at, Row(answers={"topic": {"type": "choice", "choice": "billing"}}))
    journal.close()


def records(parts: Parts, *ids: int) -> bytes:
    """The bytes the journal's records of ``ids`` take (written to a journal of their own)."""
    path = parts.folder / "journal-00000000.bin"
    path.unlink(missing_ok=True)
    journal_of(parts, *ids)
    data = path.read_bytes()
    path.unlink()
    return data


@pytest.fixture
def parts(tmp_path: Path) -> Parts:
    parts = Parts(tmp_path / "out.parquet")
    parts.start({"version": 1}, resume=False)
    return parts


@pytest.mark.parametrize("kept", [2, -7], ids=["in its length", "in its values"])
def test_a_torn_last_journal_record_is_left_out_and_cut_off_before_the_next_records(
    parts: Parts, kept: int
) -> None:
    whole, torn = records(parts, 0, 1, 2), records(parts, 3)[:kept]  # killed in the middle of row 3
    path = parts.folder / "journal-00000000.bin"
    path.write_bytes(whole + torn)
    ids = list(range(6))
    assert sorted(parts.journaled(0, ids)) == [0, 1, 2]
    journal_of(parts, 4, 5)  # the resumed run goes on
    assert sorted(parts.journaled(0, ids)) == [0, 1, 2, 4, 5]
    assert path.read_bytes().startswith(whole + records(parts, 4))


def test_a_journal_torn_before_its_end_is_refused_naming_the_file_and_the_record(parts: Parts) -> None:
    # Records appended after a torn one, as the writer once did.
    before = records(parts, 0, 1)
    data = before + records(parts, 2)[:-7] + records(parts, 3, 4)
    path = parts.folder / "journal-00000000.bin"
    path.write_bytes(data)
    with pytest.raises(JournalError, match=rf"journal {path} record 3 \(byte {len(before)}\): expected"):
        parts.journaled(0, list(range(6)))
    path.write_bytes(data)
    with pytest.raises(JournalError, match="record 3"):
        parts.journal(0)
