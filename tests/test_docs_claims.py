"""Claims of the README, CONTRIBUTING.md and the docs that the recordings can contradict, checked against
them."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PROVIDERS = ROOT / "tests" / "fixtures" / "providers"
NUMBERS = {
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}


def recordings() -> dict[str, dict[str, object]]:
    return {
        path.parent.name: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(PROVIDERS.glob("*/results.json"))
    }


def page(name: str) -> str:
    return " ".join((ROOT / name).read_text(encoding="utf-8").split())


def transcribed() -> set[str]:
    """The fixture folders whose provenance says they were transcribed from documentation, not recorded."""
    return {
        path.parent.name
        for path in PROVIDERS.glob("*/provenance.json")
        if str(json.loads(path.read_text(encoding="utf-8")).get("how", "")).startswith("transcribed")
    }


def test_contributing_counts_the_recordings_that_are_in_the_repository() -> None:
    said = re.search(
        r"(\w+) recordings sit in `tests/fixtures/providers/`, beside (\w+) transcribed",
        page("CONTRIBUTING.md"),
    )
    assert said is not None, "CONTRIBUTING.md no longer says how many recordings there are"
    live, documented = (NUMBERS[word.lower()] for word in said.groups())
    assert (live, documented) == (len(set(recordings()) - transcribed()), len(transcribed()))


def test_contributing_quotes_the_change_report_of_the_oldest_release_as_it_stands() -> None:
    report = (ROOT / "reports" / "changes" / "llamacpp-b10434-b11434.md").read_text(encoding="utf-8")
    counted = re.search(r"(\d+) of (\d+) probes present in both changed verdict", report)
    assert counted is not None
    assert f"b11434 {counted.group(1)} of {counted.group(2)} did" in page("CONTRIBUTING.md")


def test_contributing_counts_the_system_one_probes_that_meet_no_route_on_b10434() -> None:
    said = re.search(r"(\d+) of the (\d+) System One probes meet no route \(`404`\)", page("CONTRIBUTING.md"))
    assert said is not None, "CONTRIBUTING.md no longer says how many System One probes meet a 404"
    probes = [p for p in recordings()["llamacpp-b10434"]["probes"] if p["id"].startswith("systemone-")]  # type: ignore[attr-defined]
    assert (int(said.group(1)), int(said.group(2))) == (sum(p["status"] == 404 for p in probes), len(probes))


def test_the_readme_holds_no_dated_measurement() -> None:
    dated = re.findall(r"20\d\d-\d\d-\d\d|\d\d:\d\d UTC", page("README.md"))
    assert dated == [], (
        f"expected no date in the README (figures live in reports/performance.md), got {dated}"
    )


def test_docs_systemone_names_every_recorded_chat_server_whose_system_one_route_exists() -> None:
    text = " ".join((ROOT / "docs" / "systemone.md").read_text(encoding="utf-8").split())
    names = {"llamacpp": "llama.cpp", "vllm": "vLLM"}
    for key, recording in recordings().items():
        if recording["server"] not in names:
            continue  # System One servers and the gateway serve the route by design
        route = next(p for p in recording["probes"] if p["id"] == "systemone-route")  # type: ignore[attr-defined]
        if route["status"] != 404:
            assert names[str(recording["server"])] in text, f"{key} has the route; docs/systemone.md omits it"
