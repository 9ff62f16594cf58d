"""A run's parts folder: files made durable before and after their rename, and the journal's records."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from jevper.batch._files import Format
from jevper.batch._parts import Parts
from jevper.batch._schema import ERROR_TYPE

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("error", ERROR_TYPE)])


def a_batch(*ids: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"id": i, "error": None} for i in ids], schema=SCHEMA)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every fsync (of the path its descriptor names) and rename, in order."""
    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def synced(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def renamed(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(("rename", f"{os.fspath(src)} -> {os.fspath(dst)}"))
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
    partial = tmp_path / "out.jsonl.partial"
    assert disk == [
        ("fsync", str(partial)),
        ("rename", f"{partial} -> {tmp_path / 'out.jsonl'}"),
        ("fsync", str(tmp_path)),
    ]
