"""Every file jevper writes is written whole or not at all, by the one writer in jevper/_atomic.py: a write
that fails midway leaves the old file as it was and no temporary file beside it, and a finished one is
synced to the disk with its folder before and after the rename."""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from _source import nodes

from jevper.batch._parts import Parts
from jevper.evaluate import Binding, Calibration, Calibrator, QuestionCalibration
from jevper.probe.recording import Layout

PACKAGE = Path(__file__).resolve().parents[1] / "jevper"


def _calibration(path: Path) -> None:
    binding = Binding("llamacpp", "b11549", "m", "grammar", "chat_completions", "digest")
    question = QuestionCalibration("noul", ("true", "false"), Calibrator("platt", platt=(0.7, -0.4)), {})
    Calibration(binding, {"angry": question}, folds=5, seed=0).save(path)


def _recording(path: Path) -> None:
    recording = next(iter(Layout.repository().recordings()))
    recording.save(path.parent)
    assert path.name == "results.json"


def _evaluation(path: Path) -> None:
    from jevper.evaluate import cli

    cli.write_atomically(path, '{"rows": 1}\n')


def _batch_output(path: Path) -> None:
    parts = Parts(path, path.parent / "parts")
    parts.start({"version": 1}, resume=False)
    schema = pa.schema([("id", pa.int64()), ("error", pa.struct([("type", pa.string())]))])
    parts.commit(0, pa.RecordBatch.from_pylist([{"id": 1, "error": None}], schema=schema))
    parts.finish(schema, "parquet")


WRITERS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "calibration.json": ("calibration.json", _calibration),
    "a recording's results.json": ("results.json", _recording),
    "metrics.json": ("metrics.json", _evaluation),
    "a batch's output": ("out.parquet", _batch_output),
}


@pytest.mark.parametrize("writer", WRITERS, ids=list(WRITERS))
def test_a_write_that_fails_midway_leaves_the_old_file_whole_and_no_temporary_file(
    writer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, write = WRITERS[writer]
    folder = tmp_path / "folder"
    folder.mkdir()
    target = folder / name
    target.write_bytes(b"the old file")
    before = set(folder.iterdir())

    real_replace = os.replace

    def full_disk(source: object, destination: object) -> None:
        if Path(str(destination)) == target:
            raise OSError(28, "No space left on device")
        real_replace(source, destination)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write(target)
    assert target.read_bytes() == b"the old file"
    left = [
        p.name
        for p in set(folder.iterdir()) - before
        if p.name.startswith(".") or p.suffix in {".partial", ".tmp"}
    ]
    assert left == []


@pytest.mark.parametrize("writer", WRITERS, ids=list(WRITERS))
def test_a_finished_write_is_synced_before_the_rename_and_its_folder_after(
    writer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, write = WRITERS[writer]
    target = tmp_path / name
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("folder" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real_fsync(fd)

    def replace(source: object, destination: object) -> None:
        if Path(str(destination)) == target:
            events.append("rename")
        real_replace(source, destination)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write(target)
    last = len(events) - 1 - events[::-1].index("rename")
    assert events[last - 1 : last + 2] == ["file", "rename", "folder"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_text_that_cannot_be_encoded_leaves_nothing_behind(tmp_path: Path) -> None:
    from jevper._atomic import write_atomically

    target = tmp_path / "report.html"
    target.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(target, "a lone surrogate \udc80")
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    assert target.read_text() == "old"


def _writes_files_by_hand(path: Path) -> list[str]:
    found = []
    for node in nodes(path):
        if isinstance(node, ast.Attribute) and node.attr in {
            "replace",
            "write_text",
            "write_bytes",
            "rename",
        }:
            if node.attr == "replace" and not (isinstance(node.value, ast.Name) and node.value.id == "os"):
                continue  # str.replace, dataclasses.replace
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} .{node.attr}")
    return found


def _left_alone(line: str) -> bool:
    # A recording's folders are installed by renaming them whole (recording.replace_dir); the servers'
    # install stamps only make the next start redo an install when a crash cuts them.
    return line.startswith("jevper/servers/") or (
        line.startswith("jevper/probe/recording.py") and line.endswith(".rename")
    )


def test_no_module_but_the_atomic_writer_renames_or_writes_a_file_by_hand() -> None:
    found = [
        line
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "_atomic.py"
        for line in _writes_files_by_hand(path)
    ]
    assert [line for line in found if not _left_alone(line)] == []
