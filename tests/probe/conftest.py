"""Harness-test fixtures shared by the offline and the live merge tests."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from jevper.probe.recording import Layout, load_results, save_results


def _first_run(key: str, to: Path) -> Path:
    """A copy of the committed recording `key` as its first run left it: the probes and the record of
    runs merged in since are taken out, so a test starts from one whole run."""
    shutil.copytree(Layout.repository().fixture_dir(key), to)
    index = load_results(to / "results.json")
    later = {probe_id for update in index.updates for probe_id in update.probes}
    for probe_id in later:
        (to / f"{probe_id}.yaml").unlink()
    kept = tuple(p for p in index.probes if p.id not in later)
    save_results(dataclasses.replace(index, probes=kept, updates=()), to / "results.json")
    provenance = json.loads((to / "provenance.json").read_text(encoding="utf-8"))
    provenance.pop("updates", None)
    (to / "provenance.json").write_text(json.dumps(provenance, indent=2, ensure_ascii=False) + "\n")
    return to


@pytest.fixture
def first_run() -> Callable[[str, Path], Path]:
    """Copy a committed recording as its first run left it (see ``_first_run``)."""
    return _first_run
