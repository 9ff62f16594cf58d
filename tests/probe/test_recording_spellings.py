"""A recording made by an older jevper quotes the commands as they were spelled then; the reports, and the
recording when it is written again, quote the spelling that runs today."""

from __future__ import annotations

import shutil
from pathlib import Path

from jevper.probe.recording import Recording

PROVIDERS = Path(__file__).parents[1] / "fixtures" / "providers"
RETIRED = ("--binary built", "jevper.probe.xllamacpp_server")


def commands(recording: Recording) -> list[str]:
    runs = [recording.run, *(later.run for later in recording.later)]
    flags = [str(v) for run in runs for v in (run.flags or {}).values()]
    return [c for run in runs for c in (run.command, run.server_command) if c] + flags


def test_the_b11434_recording_quotes_the_release_option_that_spawns_it_today() -> None:
    recording = Recording.load(PROVIDERS / "llamacpp-b11434")
    assert recording.command == "python -m jevper.probe --server llamacpp --spawn --release b11434"


def test_no_committed_recording_or_report_quotes_a_retired_spelling_of_a_command() -> None:
    root = PROVIDERS.parents[2]
    files = [
        *PROVIDERS.glob("*/*.json"),
        *(root / "reports").glob("*.md"),
        *(root / "reports").glob("*/*.md"),
    ]
    quoted = [
        f"{path.relative_to(root)}: {old}" for path in files for old in RETIRED if old in path.read_text()
    ]
    assert quoted == [], f"expected today's spellings (python -m jevper.probe replay, report), got {quoted}"


def test_a_recording_written_again_keeps_today_s_spellings_and_its_verdicts(tmp_path: Path) -> None:
    folder = tmp_path / "llamacpp-b11549"
    shutil.copytree(PROVIDERS / "llamacpp-b11549", folder)
    before = Recording.load(folder)
    after = Recording.load(before.save().folder)  # type: ignore[arg-type]
    assert after.probes == before.probes
    assert commands(after) == commands(before)
    text = (folder / "provenance.json").read_text(encoding="utf-8")
    assert "jevper.servers.xllamacpp_server" in text
    assert "jevper.probe.xllamacpp_server" not in text
