"""A recording is installed in one atomic step, and nothing left behind by a crash is read as one."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jevper.probe import recording as recording_module
from jevper.probe.recording import Layout, Recording, iter_recordings, replace_dir

COMMITTED = Layout.repository()
KEY = "callo-0.3.1"


class Crash(BaseException):
    """The process dying at this point: nothing after it runs (not even an `except Exception`)."""


def folder_with(path: Path, marker: str) -> Path:
    path.mkdir(parents=True)
    (path / "marker").write_text(marker)
    (path / "cassette.yaml").write_text(marker * 1000)
    return path


def crash_at(monkeypatch: pytest.MonkeyPatch, step: int, *, after: bool) -> list[str]:
    """Make the `step`-th filesystem change of an install crash (before or after it is made)."""
    steps: list[str] = []

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def change(*args: Any, **kwargs: Any) -> Any:
            steps.append(name)
            if len(steps) == step and not after:
                raise Crash(name)
            done = real(*args, **kwargs)
            if len(steps) == step and after:
                raise Crash(name)
            return done

        return change

    # Path.rename goes through os.rename.
    monkeypatch.setattr(os, "rename", counted("rename", os.rename))
    monkeypatch.setattr(shutil, "rmtree", counted("rmtree", shutil.rmtree))
    if hasattr(recording_module, "exchange"):
        monkeypatch.setattr(recording_module, "exchange", counted("exchange", recording_module.exchange))
    return steps


@pytest.mark.parametrize("after", [False, True], ids=["before-the-step", "after-the-step"])
@pytest.mark.parametrize("step", [1, 2, 3, 4])
def test_a_crash_at_any_step_of_an_install_leaves_the_old_folder_or_the_new_one_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int, after: bool
) -> None:
    target = folder_with(tmp_path / "llamacpp-b1", "old")
    source = folder_with(tmp_path / ".llamacpp-b1.recording-x", "new")
    steps = crash_at(monkeypatch, step, after=after)

    # An install over a recording takes two steps here; a later step set to crash is never reached.
    with pytest.raises(Crash) if step <= 2 else contextlib.suppress(Crash):
        replace_dir(source, target)
    monkeypatch.undo()

    assert target.is_dir(), f"nothing at the recording's place after a crash at {steps}"
    marker = (target / "marker").read_text()
    assert marker in ("old", "new")
    assert (target / "cassette.yaml").read_text() == marker * 1000
    visible = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    assert visible == ["llamacpp-b1"], f"a leftover beside the recording after a crash at {steps}"


def test_an_install_over_a_recording_completes_with_the_new_folder_and_no_leftover(tmp_path: Path) -> None:
    target = folder_with(tmp_path / "llamacpp-b1", "old")
    replace_dir(folder_with(tmp_path / ".llamacpp-b1.recording-x", "new"), target)
    assert (target / "marker").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llamacpp-b1"]


@pytest.mark.skipif(sys.platform != "linux", reason="the one-step exchange is Linux's renameat2")
def test_on_linux_two_folders_are_exchanged_in_one_call(tmp_path: Path) -> None:
    left, right = folder_with(tmp_path / "a", "a"), folder_with(tmp_path / "b", "b")
    assert recording_module.exchange(left, right)
    assert ((left / "marker").read_text(), (right / "marker").read_text()) == ("b", "a")


def test_without_the_exchange_a_crash_between_the_renames_is_mended_by_the_next_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recording_module, "exchange", lambda source, target: False)
    target = folder_with(tmp_path / "llamacpp-b1", "old")
    steps = crash_at(monkeypatch, 3, after=False)
    with pytest.raises(Crash):
        replace_dir(folder_with(tmp_path / ".llamacpp-b1.recording-x", "new"), target)
    assert steps == ["exchange", "rename", "rename"]
    monkeypatch.undo()
    monkeypatch.setattr(recording_module, "exchange", lambda source, target: False)
    # The old folder is hidden, never read as a recording; the next install puts it back first.
    assert not target.exists() and not [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    replace_dir(folder_with(tmp_path / ".llamacpp-b1.recording-y", "newer"), target)
    assert (target / "marker").read_text() == "newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".llamacpp-b1.recording-x", "llamacpp-b1"]


@pytest.mark.parametrize(
    "leftover", [f"{KEY}.old-4242", f".{KEY}.old-4242", f"{KEY}.partial", f".{KEY}.recording-1"]
)
def test_a_folder_left_beside_a_recording_is_never_read_as_one(tmp_path: Path, leftover: str) -> None:
    layout = Layout.repository(tmp_path)
    shutil.copytree(COMMITTED.fixture_dir(KEY), layout.fixture_dir(KEY))
    shutil.copytree(COMMITTED.fixture_dir(KEY), layout.fixtures_root / leftover)

    found = [r.key for r in iter_recordings(layout)]

    assert found == [KEY]


def test_a_recording_saved_and_loaded_again_is_the_same_object_and_the_same_bytes(tmp_path: Path) -> None:
    for committed in COMMITTED.recordings():
        copy = committed.save(tmp_path / committed.key)
        assert Recording.load(tmp_path / committed.key) == copy == committed
        for name in ("results.json", "provenance.json"):
            assert (tmp_path / committed.key / name).read_bytes() == (
                COMMITTED.fixture_dir(committed.key) / name
            ).read_bytes()
