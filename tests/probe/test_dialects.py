"""Which body a decision route speaks: the probe names the dialect of a server that speaks SGLang's body on
/v1/decisions or Ollama's on /v1/systemone, and grades the route's probes by that dialect's rules; the
transcribed fixtures of both replay offline with the dialect named on the page.

`python tests/probe/test_dialects.py` writes the two fixtures again (tests/fixtures/providers/
sglang-documented and ollama-documented), from jevper.testing.dialects.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path

import markupsafe
import pytest

from jevper.probe import dialects, reports
from jevper.probe.cassettes import Exchange
from jevper.probe.catalogue import load_catalogue
from jevper.probe.cli import main
from jevper.probe.presets import get_preset
from jevper.probe.recording import Layout, Recording
from jevper.probe.session import Target, record, replay
from jevper.testing.dialects import Dialect, running

CATALOGUE = load_catalogue()
LAYOUT = Layout.repository()
#: dialect -> (the preset's server kind, the route it speaks, the fixture's key).
FIXTURES: dict[Dialect, tuple[str, str, str]] = {
    "sglang": ("sglang", "decisions", "sglang-documented"),
    "ollama": ("ollama", "systemone", "ollama-documented"),
}
HOW = (
    "transcribed: not a recording of {name}. jevper.testing.dialects speaks {name}'s documented body on "
    "POST /v1/{route} (../shared/decisions.md, 'Dialects', and its sources), and the probe's answers from "
    "it are kept so the dialect can be seen named and graded offline"
)


def transcribe(dialect: Dialect, layout: Layout) -> Recording:
    """Record the route's probes from a server speaking the dialect, and label the recording transcribed."""
    kind, route, _ = FIXTURES[dialect]
    probes = [p for p in CATALOGUE.probes if p.surface == route]
    with running(dialect) as server:
        preset = get_preset(kind).with_overrides(base_url=server.base_url, model="dialect-model")
        target = Target(
            preset, "documented", "dialect-model (none: a test server)", "python tests/probe/test_dialects.py"
        )
        report = record(target, probes, catalogue=CATALOGUE, layout=layout, api_key=None, timeout=10)
    assert report.complete
    name = get_preset(kind).display_name
    labelled = dataclasses.replace(
        report.recording, provenance="transcribed", how=HOW.format(name=name, route=route)
    )
    return labelled.save()


@pytest.mark.parametrize("dialect", list(FIXTURES))
def test_the_dialect_probe_names_the_body_the_route_speaks_and_grades_by_its_rules(
    dialect: Dialect, tmp_path: Path
) -> None:
    fresh = transcribe(dialect, Layout.out(tmp_path))
    _, route, key = FIXTURES[dialect]
    found = fresh.result(f"{route}-dialect")
    assert found is not None and found.outcome == "supported"
    if dialect == "sglang":
        assert found.verdict.startswith("speaks SGLang's body")
        # OpenAI's shape is a 400 there: "another shape", never a refusal of the feature.
        for result in fresh.probes:
            if result.id not in ("decisions-dialect", "decisions-bad-json-body"):
                assert result.outcome == "info" and result.verdict.startswith("another shape"), result.id
        # A body that is no JSON is refused, as it should be: SGLang's envelope is not OpenAI's to grade.
        bad = fresh.result("decisions-bad-json-body")
        assert bad is not None and bad.outcome == "refused" and bad.grade is None
    else:
        assert found.verdict.startswith("speaks Ollama's body")
        # Ollama's scores take 2 to 26 levels: eleven is a valid request there, answered and graded.
        eleven = fresh.result("systemone-score-eleven-levels")
        assert eleven is not None and eleven.grade == "pass" and "valid in Ollama's dialect" in eleven.verdict
        assert {r.outcome for r in fresh.probes if r.id.endswith("-256-options")} == {"refused"}
    committed = LAYOUT.load(key)
    assert committed.provenance == "transcribed" and "not a recording" in committed.how
    assert [r.to_json() for r in committed.probes] == [
        dataclasses.replace(r, elapsed_s=committed.result(r.id).elapsed_s).to_json()  # type: ignore[union-attr]
        for r in fresh.probes
    ]


@pytest.mark.parametrize("key", [key for _, _, key in FIXTURES.values()])
def test_a_transcribed_dialect_fixture_replays_offline_and_the_page_names_its_dialect(key: str) -> None:
    committed = LAYOUT.load(key)
    assert replay(committed, CATALOGUE.probes, catalogue=CATALOGUE).to_json() == committed.to_json()
    files = reports.generate(LAYOUT)
    capabilities = files[LAYOUT.reports_dir / "capabilities.md"]
    page = files[LAYOUT.reports_dir / "index.html"]
    dialect = "SGLang's" if key.startswith("sglang") else "Ollama's"
    assert f"{committed.server} {committed.release} (transcribed)" in capabilities
    assert f"speaks {dialect} body" in capabilities
    assert str(markupsafe.escape(f"speaks {dialect} body")) in page  # the page escapes the apostrophe
    assert "not a recording" in page


def test_a_route_speaking_its_own_dialect_is_read_as_written() -> None:
    # The gateway speaks OpenAI's body on /v1/decisions and TypeSafe's on /v1/systemone: no probe of its
    # recording reads "another shape".
    gateway = LAYOUT.load("jevper-0.1.0")
    assert not [r.id for r in gateway.probes if r.verdict.startswith("another shape")]


if __name__ == "__main__":
    for chosen, (_, _, folder) in FIXTURES.items():
        with tempfile.TemporaryDirectory() as scratch:
            made = transcribe(chosen, Layout.out(Path(scratch)))
            assert made.folder is not None
            shutil.rmtree(LAYOUT.fixture_dir(folder), ignore_errors=True)
            shutil.copytree(made.folder, LAYOUT.fixture_dir(folder))
            print(f"wrote {LAYOUT.fixture_dir(folder)}", file=sys.stderr)


def test_a_lenient_typesafe_server_that_takes_twelve_levels_is_not_taken_for_ollama() -> None:
    answered = '{"answers": {"q": {"type": "noul", "noul": 0.5}}}'

    def exchange(status: int) -> Exchange:
        text = answered if status == 200 else '{"error": {"message": "no"}}'
        return Exchange("POST", "/v1/systemone", {}, status, "application/json", text)

    # callo takes 1 to 255 levels and ignores keep_alive, and takes a choice of 27 options as TypeSafe's must.
    assert (
        dialects.systemone_dialect([exchange(200), exchange(200), exchange(200)]).dialect == dialects.TYPESAFE
    )
    assert (
        dialects.systemone_dialect([exchange(200), exchange(422), exchange(200)]).dialect == dialects.TYPESAFE
    )
    assert (
        dialects.systemone_dialect([exchange(200), exchange(200), exchange(400)]).dialect == dialects.OLLAMA
    )
    assert dialects.systemone_dialect([exchange(501), exchange(501), exchange(501)]).dialect is None


def test_replay_grades_a_transcribed_fixture_again_like_a_recording(tmp_path: Path) -> None:
    key = FIXTURES["sglang"][2]
    shutil.copytree(LAYOUT.fixture_dir(key), tmp_path / "fixtures" / key)
    before = (tmp_path / "fixtures" / key / "results.json").read_bytes()
    assert main(["replay", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "fixtures" / key / "results.json").read_bytes() == before
