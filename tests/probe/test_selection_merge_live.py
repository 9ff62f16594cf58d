"""`--only --spawn` against the embedded llama.cpp into a copy of its committed recording."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from jevper.probe import cli
from jevper.probe.recording import Layout, Recording
from jevper.probe.reports import generate
from jevper.servers.llamacpp import DEFAULT_RELEASE

pytestmark = pytest.mark.live

COMMITTED = Layout.repository()
KEY = f"llamacpp-{DEFAULT_RELEASE}"
RERUN = ("chat-bad-path", "chat-logprobs")


def test_re_probing_two_probes_of_the_embedded_server_merges_them_and_names_the_run(
    tmp_path: Path, first_run: Callable[[str, Path], Path]
) -> None:
    out = tmp_path / "out"
    first_run(KEY, out / "fixtures" / KEY)
    folder = out / "fixtures" / KEY
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    first = Recording.load(folder)

    only = [arg for probe_id in RERUN for arg in ("--only", probe_id)]
    assert cli.main(["--server", "llamacpp", "--spawn", "--out", str(out), *only]) == cli.EXIT_OK

    after = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert set(after) == set(before)
    kept = set(before) - {f"{p}.yaml" for p in RERUN} - {"provenance.json", "results.json"}
    assert all(after[name] == before[name] for name in kept)
    provenance = Recording.load(folder)
    assert provenance.run.recorded_on == COMMITTED.load(KEY).recorded_on
    assert provenance.run.command == "python -m jevper.probe --server llamacpp --spawn"
    (update,) = provenance.later
    assert (update.run.release, update.probes) == (DEFAULT_RELEASE, RERUN)
    assert (update.run.server_command or "").startswith("python -m jevper.servers.xllamacpp_server ")
    index = Recording.load(out / "fixtures" / KEY)
    # The copy holds the first run's probes alone; re-running two of them adds none.
    assert len(index.probes) == len(first.probes) and index.later[0].probes == RERUN
    # llama.cpp answers these two as it did when the recording was made.
    committed = COMMITTED.load(KEY)
    for probe_id in RERUN:
        old, new = committed.result(probe_id), index.result(probe_id)
        assert old is not None and new is not None
        assert (new.status, new.outcome, new.verdict) == (old.status, old.outcome, old.verdict)
    page = generate(Layout.out(out))[out / "reports" / f"{KEY}.md"]
    assert "`chat-bad-path`, `chat-logprobs` re-run on " in page
