"""The command lines speak one vocabulary: every option of `--help` has help and shows its default, no
concept goes by another spelling, and the spellings of the release before still work, with a warning
naming the new one."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pytest

from jevper.batch import cli as batch_cli
from jevper.evaluate import cli as evaluate_cli
from jevper.probe import cli as probe_cli
from jevper.serve import cli as serve_cli

#: A concept's one spelling, and the other spellings it must not go by in any command's help.
OTHER_SPELLINGS = {
    "--base-url": ("--url", "--server-url", "--endpoint", "--host-url"),
    "--concurrency": ("--pool", "--slots", "--parallel", "--max-concurrency", "--workers-per-server"),
    "--limit-concurrency": ("--max-in-flight", "--in-flight", "--max-requests"),
    "--api-key": ("--key", "--token", "--api-keys", "--auth"),
    "--server": ("--server-kind", "--kind"),
    "--release": ("--server-release", "--build", "--binary"),
    "--api": ("--surface",),
}
#: Options whose value is a server's URL: each takes URL=MODEL the same way.
URL_OPTIONS = ("--base-url", "--upstream")


@dataclass(frozen=True)
class Entry:
    """One option as `--help` shows it: its spellings, its value's name and its help text."""

    flags: tuple[str, ...]
    metavar: str
    help: str


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    actions: tuple[argparse.Action, ...]


def _probe_commands() -> Iterator[Command]:
    parser = probe_cli.build_parser()
    chooser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in chooser.choices.items():
        yield Command(f"python -m jevper.probe {name}", sub.format_help(), tuple(sub._actions))


def commands() -> list[Command]:
    made: list[Command] = list(_probe_commands())
    for prog, parser in (
        ("python -m jevper.serve", serve_cli.parser()),
        ("python -m jevper.batch", batch_cli.parser()),
        ("python -m jevper.evaluate", evaluate_cli.parser()),
    ):
        made.append(Command(prog, parser.format_help(), tuple(parser._actions)))
    return made


def entries(text: str) -> list[Entry]:
    """Every option of a `--help` text: an entry starts two spaces in with a dash, its help follows on
    the same line after two spaces or more, or on the lines below, indented further."""
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if re.match(r"^  -", line):
            invocation, first = _split(line.strip())
            found.append((invocation, [first] if first else []))
        elif found and re.match(r"^ {3,}\S", line):
            found[-1][1].append(line.strip())
        elif not line.startswith(" "):
            found.append(("", []))  # a section's title ends the entry before it
    out = []
    for invocation, lines in found:
        if not invocation:
            continue
        words = [w.rstrip(",") for w in invocation.split()]
        flags = tuple(w for w in words if w.startswith("-"))
        metavar = " ".join(w for w in words if not w.startswith("-"))
        out.append(Entry(flags, metavar, " ".join(lines)))
    return out


def _split(line: str) -> tuple[str, str]:
    """An entry's first line: the invocation, and the help after two spaces or more (or nothing)."""
    parts = re.split(r"\s{2,}", line, maxsplit=1)
    return (parts[0], parts[1]) if len(parts) == 2 else (parts[0], "")


def has_default(action: argparse.Action) -> bool:
    default = action.default
    empty = isinstance(default, list | tuple | dict) and not default
    return not (default is None or default is False or default is argparse.SUPPRESS or empty)


ALL = commands()


@pytest.fixture(autouse=True)
def _wide_help(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")


@pytest.mark.parametrize("command", ALL, ids=[c.name for c in ALL])
def test_every_option_of_every_command_has_help(command: Command) -> None:
    shown = entries(command.help)
    assert len(shown) >= 3, command.help
    assert [e.flags for e in shown if not e.help] == []


@pytest.mark.parametrize("command", ALL, ids=[c.name for c in ALL])
def test_every_option_with_a_default_shows_it_in_the_help(command: Command) -> None:
    shown = {flag: e for e in entries(command.help) for flag in e.flags}
    hidden = [
        a.option_strings[-1]
        for a in command.actions
        if a.option_strings and a.help is not argparse.SUPPRESS and has_default(a)
        if "default" not in shown[a.option_strings[-1]].help
    ]
    assert hidden == []


@pytest.mark.parametrize("command", ALL, ids=[c.name for c in ALL])
def test_no_option_goes_by_a_concepts_other_spelling(command: Command) -> None:
    flags = {flag for e in entries(command.help) for flag in e.flags}
    others = {other: one for one, spellings in OTHER_SPELLINGS.items() for other in spellings}
    assert {flag: others[flag] for flag in flags if flag in others} == {}


@pytest.mark.parametrize("command", ALL, ids=[c.name for c in ALL])
def test_a_servers_url_is_a_base_url_or_an_upstream_never_a_server(command: Command) -> None:
    for entry in entries(command.help):
        if "--server" in entry.flags:
            assert "URL" not in entry.metavar, entry
        if set(entry.flags) & set(URL_OPTIONS):
            assert entry.metavar == "URL[=MODEL]", entry


@pytest.mark.parametrize("command", ALL, ids=[c.name for c in ALL])
def test_every_command_that_spawns_a_server_takes_its_release(command: Command) -> None:
    flags = {flag for e in entries(command.help) for flag in e.flags}
    if "--spawn" in flags:
        assert "--release" in flags


@pytest.mark.parametrize(
    "command", [c for c in ALL if "record" in c.name or "probe" not in c.name], ids=lambda c: c.name
)
def test_every_command_that_talks_to_a_server_takes_a_key(command: Command) -> None:
    assert "--api-key" in {flag for e in entries(command.help) for flag in e.flags}


def test_the_help_parser_reads_an_option_without_help_as_such() -> None:
    parser = argparse.ArgumentParser(formatter_class=serve_cli.HelpFormatter)
    parser.add_argument("--pool", type=int, default=4)
    parser.add_argument("--base-url", metavar="URL[=MODEL]", help="a server")
    shown = {e.flags: e for e in entries(parser.format_help())}
    assert shown[("--pool",)].help == ""  # argparse shows no default where there is no help
    assert shown[("--base-url",)] == Entry(("--base-url",), "URL[=MODEL]", "a server")


# --- the old spellings -----------------------------------------------------------------------------

Parse = Callable[[Sequence[str]], argparse.Namespace]
BATCH = ["in.csv", "out.csv", "--questions", "q.json"]
EVALUATE = ["labelled.csv", "--questions", "q.json", "--out", "eval"]
ANSWERS = [*EVALUATE, "--answers", "a.csv"]


@pytest.mark.parametrize(
    ("parse", "old", "new", "read"),
    [
        (serve_cli.parse, ["--pool", "3"], "--concurrency", {"concurrency": 3}),
        (serve_cli.parse, ["--max-in-flight=5"], "--limit-concurrency", {"limit_concurrency": 5}),
        (
            batch_cli.parse,
            [*BATCH, "--server", "http://h:1/v1", "--model", "m"],
            "--base-url",
            {"base_url": [("http://h:1/v1", None)]},
        ),
        (batch_cli.parse, [*BATCH, "--slots", "2", "--slots", "3"], "--concurrency", {"concurrency": [2, 3]}),
        (
            batch_cli.parse,
            [*BATCH, "--slots", "2", "--concurrency", "9"],
            "--limit-concurrency",
            {"concurrency": [2], "limit_concurrency": 9},
        ),
        (
            evaluate_cli.parse,
            [*EVALUATE, "--server", "http://h:1/v1=org/m"],
            "--base-url",
            {"server": ["http://h:1/v1=org/m"], "model": ["org/m"]},
        ),
        (evaluate_cli.parse, [*ANSWERS, "--server-kind", "vllm"], "--server", {"server_kind": "vllm"}),
        (evaluate_cli.parse, [*ANSWERS, "--server-release", "b1"], "--release", {"server_release": "b1"}),
        (evaluate_cli.parse, [*ANSWERS, "--surface", "responses"], "--api", {"surface": "responses"}),
        (evaluate_cli.parse, [*EVALUATE, "--spawn", "--slots", "1"], "--concurrency", {"slots": [1]}),
    ],
)  # fmt: skip
def test_an_old_spelling_still_works_with_a_warning_naming_the_new_one(
    parse: Parse, old: list[str], new: str, read: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse(old)
    assert {name: getattr(args, name) for name in read} == read
    warned = capsys.readouterr().err
    assert "DeprecationWarning" in warned and f"is now spelled {new};" in warned


def test_the_new_spellings_warn_of_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    serve_cli.parse(["--concurrency", "3", "--limit-concurrency", "5"])
    batch_cli.parse(
        [*BATCH, "--base-url", "http://h:1/v1=m", "--concurrency", "2", "--limit-concurrency", "4"]
    )
    evaluate_cli.parse(
        [*EVALUATE, "--answers", "a.csv", "--server", "vllm", "--release", "b1", "--api", "auto"]
    )
    assert capsys.readouterr().err == ""


def test_the_evaluations_server_is_a_kind_as_the_probes_and_an_old_url_is_read_as_a_base_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    kind = evaluate_cli.parse([*ANSWERS, "--server", "llamacpp"])
    assert (kind.server_kind, kind.server) == ("llamacpp", None)
    url = evaluate_cli.parse([*EVALUATE, "--server", "http://h:1/v1", "--server", "llamacpp"])
    assert (url.server_kind, url.server) == ("llamacpp", ["http://h:1/v1"])
    assert capsys.readouterr().err.count("DeprecationWarning") == 1
