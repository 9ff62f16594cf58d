"""`python -m jevper.evaluate --compare SETTING ...`: the same rows under several settings, side by side
(asked of the fault server, which answers at once)."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from _answers import QUESTIONS, TICKETS

from jevper import ConfigError
from jevper.evaluate._compare import Setting, check_settings, parse_setting
from jevper.evaluate.cli import main
from jevper.testing.faults import FaultServer, running

ROWS = 12


@pytest.fixture(scope="module")
def faults() -> Iterator[FaultServer]:
    with running() as server:
        yield server


def asking(tickets: Path, faults: FaultServer) -> list[str]:
    """The command line asking the fault server the labelled rows."""
    return [
        str(tickets),
        "--questions",
        str(QUESTIONS),
        "--base-url",
        faults.base_url(),
        "--model",
        faults.model,
    ]


@pytest.fixture
def tickets(tmp_path: Path) -> Path:
    with TICKETS.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:ROWS]
    path = tmp_path / "tickets.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_two_settings_are_each_evaluated_in_a_folder_of_their_own_and_tabled_side_by_side(
    tmp_path: Path, tickets: Path, faults: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    before = len(faults.log)
    argv = asking(tickets, faults)
    settings = ["name=chat,api=chat_completions,method=logprobs", "name=responses,api=responses"]
    assert main([*argv, "--out", str(out), *(x for s in settings for x in ("--compare", s))]) == 0
    doc = json.loads((out / "metrics.json").read_text())
    assert (doc["kind"], doc["version"]) == ("jevper.comparison", 1)
    assert [s["name"] for s in doc["settings"]] == ["chat", "responses"]
    chat, responses = doc["settings"]
    assert chat["asked"] == {"base_url": faults.base_url(), "model": faults.model, "method": "logprobs",
                             "api": "chat_completions", "option_orders": 1}  # fmt: skip
    assert responses["asked"]["api"] == "responses" and responses["asked"]["method"] == "auto"
    for s in doc["settings"]:
        folder = out / s["folder"]
        own = json.loads((folder / "metrics.json").read_text())
        assert (folder / "answers.parquet").is_file() and (folder / "report.html").is_file()
        assert s["rows"] == ROWS and s["seconds"] > 0
        for qid, q in own["questions"].items():
            assert s["questions"][qid]["accuracy"] == q["before"]["accuracy"]
            assert s["questions"][qid]["ece"] == q["before"]["ece"]["equal_width"]["value"]
    # Every request the server saw was counted against one setting or the other.
    assert chat["requests"] > 0 and responses["requests"] > 0
    assert chat["requests"] + responses["requests"] == len(faults.log) - before
    page = (out / "report.html").read_text()
    assert '<a href="settings/chat/report.html">chat</a>' in page and "team ECE" in page
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if line.startswith("setting"))
    assert header.split()[:4] == ["setting", "rows", "requests", "seconds"]
    assert any(line.startswith("responses ") for line in printed.splitlines())


def test_a_setting_that_spawns_takes_the_spawned_server_in_place_of_the_urls(tmp_path: Path) -> None:
    setting = parse_setting("base-url=spawn,model=qwen2.5-coder-0.5b")
    assert setting == Setting(text="base-url=spawn,model=qwen2.5-coder-0.5b",
                              name="base-url=spawn,model=qwen2.5-coder-0.5b",
                              base_url="spawn", model="qwen2.5-coder-0.5b")  # fmt: skip
    assert setting.folder == "base-url-spawn-model-qwen2.5-coder-0.5b"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("method", "expected key=value pairs separated by commas, the keys among"),
        ("temperature=0", "got 'temperature=0'"),
        ("api=chat_completions,api=responses", "expected each key once, got 'api' twice"),
        ("name=", "got 'name='"),
    ],
)
def test_a_setting_written_wrong_is_refused_naming_the_part(text: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        parse_setting(text)


def test_one_setting_or_two_of_one_name_are_refused() -> None:
    with pytest.raises(ConfigError, match="expected two settings or more to compare, got 1"):
        check_settings([parse_setting("method=logprobs")])
    with pytest.raises(ConfigError, match=r"got \['a'\] more than once"):
        check_settings([parse_setting("name=a,method=logprobs"), parse_setting("name=a,method=grammar")])


def test_compare_over_answers_already_written_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(TICKETS), "--questions", str(QUESTIONS), "--answers", str(TICKETS), "--out", str(tmp_path)]
    assert main([*argv, "--compare", "name=a", "--compare", "name=b"]) == 2
    assert "--compare: expected --base-url or --spawn to ask under each setting, got --answers" in (
        capsys.readouterr().err
    )


def test_a_setting_may_ask_each_choice_in_several_orders_at_one_more_request_per_order_and_binds_it(
    tmp_path: Path, tickets: Path, faults: FaultServer
) -> None:
    out = tmp_path / "out"
    argv = asking(tickets, faults)
    how = "method=logprobs,api=chat_completions"
    settings = [f"name=one,{how}", f"name=two,{how},option-orders=2"]
    assert (
        main([*argv, "--rotations", "--out", str(out), *(x for s in settings for x in ("--compare", s))]) == 0
    )
    one, two = json.loads((out / "metrics.json").read_text())["settings"]
    assert (one["asked"]["option_orders"], two["asked"]["option_orders"]) == (1, 2)
    # "team", the one choice, is asked in its own order and under 3 rotations: each of those 4 asks takes
    # a second request; the yes/no and the score are asked once either way.
    assert two["requests"] - one["requests"] == ROWS * 4
    assert {"flips"} <= set(one["questions"]["team"]) and "flips" not in one["questions"]["angry"]
    with pytest.raises(
        ConfigError, match="expected option-orders to be a whole number of at least 1, got '0'"
    ):
        parse_setting("option-orders=0")


@pytest.mark.parametrize("name", ["..", ".", "../elsewhere", "a/b", "a\\b", "/tmp/x"])
def test_a_setting_named_as_a_path_is_refused_so_its_files_stay_in_their_own_folder(name: str) -> None:
    # ".." put a setting's metrics.json and report.html into DIR, where the comparison's overwrote them.
    with pytest.raises(
        ConfigError, match=rf"expected a name that is a folder's, got {re.escape(repr(name))}"
    ):
        parse_setting(f"name={name},method=logprobs")


def test_a_setting_without_a_name_is_named_by_its_text_in_a_folder_of_its_own() -> None:
    setting = parse_setting("base-url=http://127.0.0.1:8080/v1,method=logprobs")
    assert setting.name == "base-url=http://127.0.0.1:8080/v1,method=logprobs"
    assert "/" not in setting.folder and setting.folder not in (".", "..")
