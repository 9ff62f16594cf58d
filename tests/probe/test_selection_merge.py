"""`--only` into a folder that already holds a recording: the selection is merged in, and only a run
that answered every selected probe touches the recording.

Offline: a copy of the committed llama.cpp recording in tmp_path, probed through the fault server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jevper.probe import cli
from jevper.probe.cassettes import load_exchanges
from jevper.probe.catalogue import load_catalogue
from jevper.probe.presets import get_preset
from jevper.probe.recording import Layout, Recording
from jevper.probe.reports import generate
from jevper.probe.session import Target, record
from jevper.testing.faults import FaultServer, running

FirstRun = Callable[[str, Path], Path]

CATALOGUE = load_catalogue()
COMMITTED = Layout.repository()
KEY = "llamacpp-b10434"
RERUN = ("chat-logprobs", "chat-bad-path")


def on_disk(path: Path) -> dict[str, Any]:
    """A provenance file as written: the JSON object itself."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root (relative path -> bytes)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def out(tmp_path: Path, first_run: FirstRun) -> Path:
    """An --out folder holding a copy of the committed recording of the canonical probes."""
    folder = tmp_path / "out"
    first_run(KEY, folder / "fixtures" / KEY)
    return folder


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with running(model="smollm2") as started:
        yield started


def probe_into(out: Path, base_url: str, *only: str, extra: tuple[str, ...] = ()) -> int:
    argv = ["--server", "llamacpp", "--base-url", base_url, "--release", "b10434"]
    argv += ["--model", "smollm2", "--out", str(out), "--timeout", "5", *extra]
    return cli.main([*argv, *(arg for probe_id in only for arg in ("--only", probe_id))])


def test_an_only_run_replaces_its_probes_cassettes_and_verdicts_and_keeps_every_other_byte(
    out: Path, server: FaultServer
) -> None:
    before = snapshot(out / "fixtures")
    old = Recording.load(out / "fixtures" / KEY)

    assert probe_into(out, server.base_url(), *RERUN) == cli.EXIT_OK

    after = snapshot(out / "fixtures")
    rerun_files = {f"{KEY}/{probe_id}.yaml" for probe_id in RERUN}
    changed = {name for name in before if before[name] != after.get(name)}
    assert changed == rerun_files | {f"{KEY}/provenance.json", f"{KEY}/results.json"}
    assert set(after) == set(before)
    merged = Recording.load(out / "fixtures" / KEY)
    assert [p.id for p in merged.probes] == [p.id for p in old.probes]
    for result in merged.probes:
        if result.id in RERUN:
            exchanges = load_exchanges(merged.cassette(result.id))
            assert result.status == exchanges[-1].status
        else:
            assert result == old.result(result.id), result.id
    # The fault server answers 3 alternatives where llama.cpp gave 20: the verdict is the new run's.
    logprobs = merged.result("chat-logprobs")
    assert logprobs is not None and logprobs.verdict.startswith("3 alternatives")
    assert (merged.recorded_on, merged.command) == (old.recorded_on, old.command)


def test_provenance_keeps_the_first_run_and_names_the_run_each_re_run_probe_came_from(
    out: Path, server: FaultServer
) -> None:
    first = on_disk(out / "fixtures" / KEY / "provenance.json")

    assert probe_into(out, server.base_url(), *RERUN) == cli.EXIT_OK
    second = probe_into(out, server.base_url(), "chat-bad-path", "chat-bad-model", extra=("--timeout", "7"))
    assert second == cli.EXIT_OK

    provenance = on_disk(out / "fixtures" / KEY / "provenance.json")
    updates = provenance.pop("updates")
    assert provenance == first
    # chat-bad-path was answered again by the second run: it belongs to that run alone.
    assert [u["probes"] for u in updates] == [["chat-logprobs"], ["chat-bad-model", "chat-bad-path"]]
    assert [u["flags"]["timeout_s"] for u in updates] == [5.0, 7.0]
    for update in updates:
        assert update["release"] == "b10434"
        assert update["recorded_on"]
        assert "--only chat-bad-" in update["command"] or "--only chat-logprobs" in update["command"]
        assert update["flags"]["all_probes"] is False
    index = Recording.load(out / "fixtures" / KEY)
    assert [u.probes for u in index.later] == [("chat-logprobs",), ("chat-bad-model", "chat-bad-path")]
    assert index.run_of("chat-bad-path") == index.later[1]
    assert index.run_of("chat-grammar") is None


def test_running_the_same_selection_twice_leaves_one_later_run_naming_it(
    out: Path, server: FaultServer
) -> None:
    assert probe_into(out, server.base_url(), *RERUN) == cli.EXIT_OK
    assert probe_into(out, server.base_url(), *RERUN) == cli.EXIT_OK
    index = Recording.load(out / "fixtures" / KEY)
    assert [u.probes for u in index.later] == [tuple(sorted(RERUN))]


@pytest.mark.parametrize(
    ("faults", "only"),
    [
        (("ok", "crash"), ("chat-logprobs", "chat-logprobs-1-top", "chat-logprobs-5-tops")),
        (("ok", "hang-no-bytes"), ("chat-logprobs", "chat-logprobs-1-top")),
        (("connection-reset",), ("chat-logprobs",)),
    ],
    ids=["the-server-dies-after-one-probe", "a-probe-times-out", "the-connection-breaks"],
)
def test_an_only_run_that_does_not_answer_every_probe_leaves_the_recording_byte_identical(
    out: Path, server: FaultServer, faults: tuple[str, ...], only: tuple[str, ...]
) -> None:
    before = snapshot(out)

    status = probe_into(out, server.base_url(*faults), *only, extra=("--timeout", "1"))

    assert status == cli.EXIT_INCOMPLETE
    after = snapshot(out)
    partial = {name: data for name, data in after.items() if name.startswith(f"fixtures/{KEY}.partial/")}
    assert {name: data for name, data in after.items() if name not in partial} == before
    assert Recording.load(out / "fixtures" / f"{KEY}.partial").result(only[0]) is not None


def test_an_only_run_with_another_model_is_refused_before_anything_is_sent(
    out: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(out)
    argv = ["--server", "llamacpp", "--base-url", server.base_url(), "--release", "b10434"]
    status = cli.main([*argv, "--model", "other-model", "--out", str(out), "--only", "chat-logprobs"])
    assert status == cli.EXIT_USAGE
    assert snapshot(out) == before
    assert [e.path for e in server.log if e.method == "POST"] == []
    assert "recorded with model 'smollm2', this run asks 'other-model'" in capsys.readouterr().err


def test_a_merged_recording_regenerates_its_reports_naming_the_re_run_probes(
    out: Path, server: FaultServer
) -> None:
    assert probe_into(out, server.base_url(), *RERUN) == cli.EXIT_OK
    assert cli.main(["report", "--out", str(out)]) == cli.EXIT_OK

    files = generate(Layout.out(out))
    page = files[out / "reports" / f"{KEY}.md"]
    assert "`chat-bad-path`, `chat-logprobs` re-run on " in page
    assert "3 alternatives (asked for 20)" in page
    assert "re-run on" in files[out / "reports" / "capabilities.md"]
    assert "recorded live 2026-11-29, 2 probes re-run " in files[out / "reports" / "index.html"]
    for path, content in files.items():
        assert path.read_text(encoding="utf-8") == content, path


def test_a_change_report_against_a_merged_recording_names_the_run_of_its_re_run_probes(
    out: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert probe_into(out, server.base_url(), *RERUN) == cli.EXIT_OK
    capsys.readouterr()

    committed = str(COMMITTED.fixture_dir(KEY) / "results.json")
    assert cli.main(["diff", committed, KEY, "--out", str(out)]) == cli.EXIT_OK

    report = capsys.readouterr().out
    assert "## chat-logprobs" in report
    assert "; chat-bad-path, chat-logprobs re-run on " in report
    assert "--only chat-logprobs --only chat-bad-path`)" in report


def test_replaying_a_merged_recording_keeps_the_runs_it_lists(out: Path, server: FaultServer) -> None:
    assert probe_into(out, server.base_url(), *RERUN) == cli.EXIT_OK
    index = out / "fixtures" / KEY / "results.json"
    merged = index.read_bytes()

    assert cli.main(["replay", "--out", str(out), "--server", "llamacpp"]) == cli.EXIT_OK

    assert index.read_bytes() == merged


def test_a_probe_missing_from_the_recording_is_added_by_an_only_run(out: Path, server: FaultServer) -> None:
    old = Recording.load(out / "fixtures" / KEY)
    old.with_probes(tuple(p for p in old.probes if p.id != "chat-bad-path")).save()
    old.cassette("chat-bad-path").unlink()

    assert probe_into(out, server.base_url(), "chat-bad-path") == cli.EXIT_OK

    merged = Recording.load(out / "fixtures" / KEY)
    assert [p.id for p in merged.probes][-1] == "chat-bad-path"
    assert len(merged.probes) == len(old.probes)
    assert (out / "fixtures" / KEY / "chat-bad-path.yaml").is_file()


def test_the_merge_works_the_same_with_the_index_inside_the_fixture_folder(
    tmp_path: Path, server: FaultServer, first_run: FirstRun
) -> None:
    layout = Layout.repository(tmp_path)
    first_run(KEY, layout.fixture_dir(KEY))
    before = snapshot(layout.fixture_dir(KEY))
    preset = get_preset("llamacpp").with_overrides(base_url=server.base_url(), model="smollm2")
    target = Target(preset=preset, release="b10434", model_name="fault server", command="merge test")

    report = record(
        target, CATALOGUE.select(list(RERUN)), catalogue=CATALOGUE, layout=layout, api_key=None, timeout=5
    )

    assert report.complete and report.merged
    after = snapshot(layout.fixture_dir(KEY))
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {f"{p}.yaml" for p in RERUN} | {"provenance.json", "results.json"}
    assert set(after) == set(before)
    index = layout.load(KEY)
    assert index.later[0].run.command == "merge test"
    assert index.later[0].run.model_name == ("fault server")
    assert not [p for p in layout.fixtures_root.iterdir() if p.name != KEY]


def test_a_provenance_written_by_the_older_merge_keeps_its_re_run_probes_named(
    out: Path, server: FaultServer
) -> None:
    path = out / "fixtures" / KEY / "provenance.json"
    legacy = {**on_disk(path), "updated_on": "2026-11-28", "updated_probes": ["chat-grammar"]}
    path.write_text(json.dumps(legacy, indent=2) + "\n")

    assert probe_into(out, server.base_url(), *RERUN) == cli.EXIT_OK

    provenance = on_disk(path)
    assert "updated_probes" not in provenance and "updated_on" not in provenance
    assert provenance["updates"][0] == {"recorded_on": "2026-11-28", "probes": ["chat-grammar"]}
    assert provenance["updates"][1]["probes"] == sorted(RERUN)


def test_an_index_made_by_a_single_run_is_written_back_byte_identical(
    tmp_path: Path, server: FaultServer
) -> None:
    # Made here: every committed recording has since taken a later run of its own (--only).
    argv = ["--server", "llamacpp", "--base-url", server.base_url(), "--release", "b77777"]
    argv += ["--model", "smollm2", "--out", str(tmp_path / "out"), "--only", "chat-logprobs"]
    assert cli.main(argv) == cli.EXIT_OK
    made = tmp_path / "out" / "fixtures" / "llamacpp-b77777"
    single = Recording.load(made)
    assert single.provenance == "recorded" and not single.later
    single.save(tmp_path / "again")
    for name in ("results.json", "provenance.json"):
        assert (tmp_path / "again" / name).read_bytes() == (made / name).read_bytes()
    assert "updates" not in json.loads((made / "results.json").read_text())


def test_an_only_run_of_an_upgraded_server_is_a_recording_of_its_own_and_is_diffed_honestly(
    out: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(out)
    argv = ["--server", "llamacpp", "--base-url", server.base_url(), "--release", "b99999"]
    argv += ["--model", "smollm2", "--out", str(out), "--only", "chat-logprobs", "--only", "chat-bad-path"]
    assert cli.main(argv) == cli.EXIT_OK
    capsys.readouterr()

    # Answers from b99999 never land in the b10434 recording, nor the reverse.
    assert {k: v for k, v in snapshot(out).items() if k in before} == before
    upgraded = Recording.load(out / "fixtures" / "llamacpp-b99999")
    assert sorted(p.id for p in upgraded.probes) == sorted(RERUN) and upgraded.later == ()
    assert cli.main(["diff", KEY, "llamacpp-b99999", "--out", str(out)]) == cli.EXIT_OK
    printed = capsys.readouterr()
    assert "2 of 2 probes present in both changed verdict; 43 more present in one recording only." in (
        printed.out
    )
    assert "diff: 2 changed of 2, 43 in one recording only" in printed.err


def test_an_only_run_into_a_fixture_folder_without_its_index_keeps_every_file_it_did_not_answer(
    tmp_path: Path, server: FaultServer, first_run: FirstRun
) -> None:
    # A recording folder whose results.json was lost: its cassettes and provenance are still kept.
    out = tmp_path / "out"
    (first_run(KEY, out / "fixtures" / KEY) / "results.json").unlink()
    before = snapshot(out / "fixtures" / KEY)

    assert probe_into(out, server.base_url(), *RERUN) == cli.EXIT_OK

    after = snapshot(out / "fixtures" / KEY)
    assert set(after) == set(before) | {"results.json"}
    assert {name for name in before if before[name] != after[name]} == {
        *(f"{p}.yaml" for p in RERUN),
        "provenance.json",
    }
    index = Recording.load(out / "fixtures" / KEY)
    assert sorted(p.id for p in index.probes) == sorted(RERUN)
    assert index.command == "python -m jevper.probe --server llamacpp --spawn"
    assert index.later[0].probes == tuple(sorted(RERUN))


def test_an_only_run_stopped_by_the_user_leaves_the_recording_and_no_scratch_folder(
    out: Path, server: FaultServer
) -> None:
    before = snapshot(out)
    layout = Layout.out(out)
    preset = get_preset("llamacpp").with_overrides(base_url=server.base_url(), model="smollm2")
    target = Target(preset=preset, release="b10434", model_name="fault server", command="interrupted")

    def interrupt(index: int, total: int, run: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        record(
            target,
            CATALOGUE.select(list(RERUN)),
            catalogue=CATALOGUE,
            layout=layout,
            api_key=None,
            timeout=5,
            progress=interrupt,
        )

    assert snapshot(out) == before
    assert sorted(p.name for p in layout.fixtures_root.iterdir()) == [KEY]
