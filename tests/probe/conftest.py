"""Harness-test fixtures shared by the offline and the live merge tests."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from jevper.probe.recording import Layout, Recording


def _first_run(key: str, to: Path) -> Path:
    """A copy of the committed recording `key` as its first run left it: the probes and the record of
    runs merged in since are taken out, so a test starts from one whole run."""
    shutil.copytree(Layout.repository().fixture_dir(key), to)
    index = Recording.load(to)
    later = {probe_id for run in index.later for probe_id in run.probes}
    for probe_id in later:
        index.cassette(probe_id).unlink()
    kept = tuple(p for p in index.probes if p.id not in later)
    dataclasses.replace(index, probes=kept, later=()).save()
    return to


@pytest.fixture
def first_run() -> Callable[[str, Path], Path]:
    """Copy a committed recording as its first run left it (see ``_first_run``)."""
    return _first_run
