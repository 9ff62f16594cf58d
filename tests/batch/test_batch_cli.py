"""The local engine's command line against the fault server: the three file formats, the summary line
and exit statuses, bad input refused before any request, and a run SIGKILLed mid-way then resumed."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _batch_data import QUESTIONS, posts

from jevper.batch.cli import main
from jevper.testing.faults import FaultServer


def write_rows(path: Path, n: int, *, extra: dict[int, dict[str, Any]] | None = None) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            row = {"id": i, "state": f"ticket {i}: charged twice", "channel": "mail"}
            row.update((extra or {}).get(i, {}))
            f.write(json.dumps(row) + "\n")
    return path


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def batch_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Ran]:
    """``python -m jevper.batch`` in this process (a subprocess pays the SDK's import each time)."""

    def run(*args: str | Path, cwd: Path) -> Ran:
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        status = main([str(a) for a in args])
        said = capsys.readouterr()
        return Ran(status, said.out, said.err)

    return run


@pytest.fixture
def questions(tmp_path: Path) -> Path:
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(QUESTIONS))
    return path


def server_args(faults: FaultServer, *more: str) -> list[str]:
    return ["--base-url", faults.base_url(), "--model", "fault-model", "--api", "systemone", *more]


def test_a_run_writes_every_row_once_says_so_in_one_line_and_exits_0(
    faults: FaultServer, tmp_path: Path, batch_cli: Callable[..., Ran], questions: Path
) -> None:
    rows = write_rows(tmp_path / "in.jsonl", 50)
    done = batch_cli(rows, "out.parquet", "--questions", questions, *server_args(faults), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jevper.batch: 50 rows, 50 answered, 0 errors, ")
    assert lines[0].endswith(" rows/s")
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("id").to_pylist() == list(range(50))
    assert table.schema.names == ["id", "topic", "urgent", "anger", "error", "usage"]
    assert not (tmp_path / "out.parquet.parts").exists()


def test_a_reader_gone_before_the_summary_costs_the_line_not_the_run(
    faults: FaultServer, tmp_path: Path, questions: Path
) -> None:
    # `... | head` after its lines, or a parent killed: stdout is a pipe with no reader any more.
    rows = write_rows(tmp_path / "in.jsonl", 20)
    command = [
        sys.executable, "-m", "jevper.batch", str(rows), "out.parquet", "--questions", str(questions),
        *server_args(faults),
    ]  # fmt: skip
    run = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert run.stdout is not None
    run.stdout.close()
    _, err = run.communicate(timeout=60)
    assert run.returncode == 0, err.decode()
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
    assert pq.read_table(tmp_path / "out.parquet").column("id").to_pylist() == list(range(20))


def test_rows_with_errors_are_counted_by_type_and_the_run_exits_1(
    faults: FaultServer, tmp_path: Path, batch_cli: Callable[..., Ran], questions: Path
) -> None:
    rows = write_rows(tmp_path / "in.jsonl", 20, extra={3: {"state": "bad \ud800"}, 9: {"state": None}})
    done = batch_cli(rows, "out.jsonl", "--questions", questions, *server_args(faults), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "18 answered, 2 errors (InvalidQuestionError 2)" in done.stdout
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [row["id"] for row in out] == list(range(20))
    # JSON Lines keep the structs, maps as objects.
    assert out[0]["topic"]["probabilities"] == {"billing": 0.5, "other": 0.5}
    assert out[0]["anger"]["legend"] == {"0": "calm", "1": "annoyed", "2": "furious"}
    assert (
        out[3]["error"]["type"] == "InvalidQuestionError" and "lone surrogate" in out[3]["error"]["message"]
    )
    assert out[3]["topic"] is None and out[0]["error"] is None


def test_csv_flattens_each_struct_into_question_dot_field_columns(
    faults: FaultServer, tmp_path: Path, batch_cli: Callable[..., Ran], questions: Path
) -> None:
    rows = tmp_path / "in.csv"
    rows.write_text('id,state,channel\n007,first ticket,mail\n008,"second, with a comma",chat\n')
    done = batch_cli(
        rows, "out.csv", "--questions", questions, "--keep-columns", *server_args(faults), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    with (tmp_path / "out.csv").open(newline="") as f:
        out = list(csv.DictReader(f))
    assert [row["id"] for row in out] == ["007", "008"]  # CSV text is kept as written
    assert out[1]["state"] == "second, with a comma" and out[1]["channel"] == "chat"
    assert out[0]["topic.choice"] == "billing"
    assert json.loads(out[0]["topic.probabilities"]) == {"billing": 0.5, "other": 0.5}
    assert float(out[0]["urgent.noul"]) == 0.7
    assert out[0]["error.type"] == "" and out[0]["usage.input_tokens"] == "36"
    assert list(out[0])[:5] == ["id", "state", "channel", "topic.type", "topic.choice"]


def test_an_existing_output_is_never_overwritten(
    faults: FaultServer, tmp_path: Path, batch_cli: Callable[..., Ran], questions: Path
) -> None:
    rows = write_rows(tmp_path / "in.jsonl", 5)
    (tmp_path / "out.parquet").write_bytes(b"precious")
    before = posts(faults)
    done = batch_cli(rows, "out.parquet", "--questions", questions, *server_args(faults), cwd=tmp_path)
    assert done.returncode == 2
    assert "never overwritten" in done.stderr
    assert (tmp_path / "out.parquet").read_bytes() == b"precious"
    assert posts(faults) == before


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("state column", "state_column: expected a column 'text'"),
        ("id column", "id_column: expected a column 'key'"),
        ("duplicate ids", "expected every id once, got 1 id(s) more than once, e.g. [3]"),
        ("missing id", "expected an id on every row, got none on row 2"),
        ("questions shape", "questions.topic.type: expected 'type' to be one of"),
        ("questions not json", "--questions"),
        ("unreadable input", "expected a JSON object"),
        ("no server", "--base-url: expected at least one server"),
        ("input suffix", "expected a file ending in .parquet"),
        ("no input", "expected a readable file, got no such file"),
    ],
)
def test_bad_input_is_refused_with_status_2_before_any_request(
    faults: FaultServer, tmp_path: Path, batch_cli: Callable[..., Ran], questions: Path, case: str, said: str
) -> None:
    rows = write_rows(tmp_path / "in.jsonl", 6)
    args: list[str | Path] = [rows, "out.parquet", "--questions", questions, *server_args(faults)]
    if case == "state column":
        args += ["--state-column", "text"]
    elif case == "id column":
        args += ["--id-column", "key"]
    elif case == "duplicate ids":
        write_rows(rows, 6, extra={4: {"id": 3}})
    elif case == "missing id":
        write_rows(rows, 6, extra={2: {"id": None}})
    elif case == "questions shape":
        questions.write_text(json.dumps({"topic": {"type": "choise", "criteria": {"a": "b"}}}))
    elif case == "questions not json":
        questions.write_text("{topic: ")
    elif case == "unreadable input":
        rows.write_text('{"id": 1, "state": "x"}\n{"id": 2, "state": \n')
    elif case == "no server":
        args = [rows, "out.parquet", "--questions", questions, "--model", "m"]
    elif case == "input suffix":
        args[0] = rows.rename(tmp_path / "in.txt")
    elif case == "no input":
        args[0] = tmp_path / "missing.jsonl"
    before = posts(faults)
    done = batch_cli(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
    assert posts(faults) == before
    assert not (tmp_path / "out.parquet").exists()


def test_when_no_server_can_be_reached_the_run_stops_with_status_3(
    tmp_path: Path, batch_cli: Callable[..., Ran], questions: Path
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    rows = write_rows(tmp_path / "in.jsonl", 10)
    started = time.monotonic()
    server = ["--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m", "--patience", "2"]
    done = batch_cli(rows, "out.parquet", "--questions", questions, *server, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "expected one of 1 server(s) to answer" in done.stderr and "--resume" in done.stderr
    # Past the 2 s of patience (not the default 30 s a restart is waited for), with the start-up.
    assert 2 <= time.monotonic() - started < 20
    assert not (tmp_path / "out.parquet").exists()


def test_a_server_that_failed_is_out_for_the_cool_down_the_command_line_gives(
    tmp_path: Path, questions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    rows = write_rows(tmp_path / "in.jsonl", 4)
    argv = [str(rows), str(tmp_path / "out.parquet"), "--questions", str(questions), "--base-url", gone,
            "--model", "m", "--patience", "0", "--cool-down", "0.01"]  # fmt: skip
    started = time.monotonic()
    assert main(argv) == 3
    took = time.monotonic() - started
    # Given up after three failures in a row, the first two each followed by its cool-down (1 s and 2 s
    # by default): under 2 s, with room for a stall of a loaded machine.
    assert took < 2.0, took
    assert "expected one of 1 server(s) to answer, got 3 failures in a row" in capsys.readouterr().err


def test_a_run_sigkilled_mid_way_and_resumed_holds_each_id_once_and_asks_again_only_rows_in_flight(
    faults: FaultServer, tmp_path: Path, batch_cli: Callable[..., Ran], questions: Path
) -> None:
    n, slots = 600, 4
    rows = write_rows(tmp_path / "in.jsonl", n)
    before = posts(faults)
    command = [
        sys.executable, "-m", "jevper.batch", str(rows), "out.parquet", "--questions", str(questions),
        *server_args(faults, "--concurrency", str(slots), "--batch-rows", "64"),
    ]  # fmt: skip
    first = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while posts(faults) - before < n // 3 and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.01)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    asked_first = posts(faults) - before
    assert n // 3 <= asked_first < n, "the first run was not killed mid-way"
    parts = tmp_path / "out.parquet.parts"
    assert any(parts.glob("part-*.arrow")) and any(parts.glob("journal-*.bin"))

    again = batch_cli(
        rows, "out.parquet", "--questions", questions, *server_args(faults, "--resume"), cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    ids = pq.read_table(tmp_path / "out.parquet").column("id").to_pylist()
    assert ids == list(range(n))
    asked = posts(faults) - before
    # Every row asked once, plus at most the rows in flight when the first run was killed.
    assert n <= asked <= n + slots
    assert again.stdout.startswith(f"jevper.batch: {n} rows, {n} answered, 0 errors")
    assert f"({asked - asked_first} asked in this run)" in again.stdout


def test_resume_refuses_a_run_that_asked_other_questions(
    faults: FaultServer, tmp_path: Path, batch_cli: Callable[..., Ran], questions: Path
) -> None:
    rows = write_rows(tmp_path / "in.jsonl", 4)
    parts = tmp_path / "out.parquet.parts"
    parts.mkdir()
    (parts / "manifest.json").write_text(json.dumps({"version": 1, "questions_sha256": "another"}))
    done = batch_cli(
        rows, "out.parquet", "--questions", questions, *server_args(faults, "--resume"), cwd=tmp_path
    )
    assert done.returncode == 2
    assert "--resume: the run in out.parquet was made with " in done.stderr
    assert "questions_sha256 'another', this one asks '" in done.stderr
    without = batch_cli(rows, "out.parquet", "--questions", questions, *server_args(faults), cwd=tmp_path)
    assert without.returncode == 2 and "pass --resume to finish it" in without.stderr


def test_a_parquet_input_keeps_its_column_types_in_the_output(
    faults: FaultServer, tmp_path: Path, batch_cli: Callable[..., Ran], questions: Path
) -> None:
    table = pa.table({"id": pa.array([5, 6], pa.int32()), "state": ["a", "b"], "score": [1.5, 2.5]})
    pq.write_table(table, tmp_path / "in.parquet")
    done = batch_cli(
        "in.parquet",
        "out.parquet",
        "--questions",
        questions,
        "--keep-columns",
        *server_args(faults),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = pq.read_table(tmp_path / "out.parquet")
    assert out.schema.field("id").type == pa.int32() and out.column("score").to_pylist() == [1.5, 2.5]


@pytest.mark.parametrize(
    ("ids", "twice"),
    [
        (list(range(20_000)), None),  # increasing across the reader's chunks of 8,192: checked as it streams
        (list(range(20_000))[::-1], None),  # unique but in no order: counted whole
        ([f"k{i}" for i in range(9_000)] + ["k5"], "k5"),  # increasing until the last chunk repeats one
        ([5, 3, 9, 3], 3),
    ],
)
def test_ids_are_checked_once_in_any_order_before_the_run(tmp_path: Path, ids: list[Any], twice: Any) -> None:
    from jevper import ConfigError
    from jevper.batch._files import Input

    pq.write_table(pa.table({"id": ids, "state": ["x"] * len(ids)}), tmp_path / "in.parquet")
    source = Input(tmp_path / "in.parquet")
    if twice is None:
        assert source.check("id").rows == len(ids)
        return
    with pytest.raises(ConfigError, match=f"more than once, e.g. \\[{twice!r}\\]"):
        source.check("id")


def test_a_csv_with_a_bom_and_a_quoted_cell_spanning_lines_classifies_every_row(
    faults: FaultServer, tmp_path: Path, batch_cli: Callable[..., Ran], questions: Path
) -> None:
    rows = tmp_path / "in.csv"
    # A note of over a mebibyte (the reader's block) whose lines a block boundary falls between.
    note = "a line of the note\n" * 60_000
    text = f'id,state,note\n1,"first line\nsecond line","{note}"\n2,plain,\n3,"a ""quoted""\r\nword",\n'
    rows.write_bytes(b"\xef\xbb\xbf" + text.encode())  # Excel's "CSV UTF-8" starts with a BOM
    done = batch_cli(rows, "out.csv", "--questions", questions, *server_args(faults), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "3 rows, 3 answered, 0 errors" in done.stdout
    with (tmp_path / "out.csv").open(newline="", encoding="utf-8") as f:
        out = list(csv.DictReader(f))
    assert [row["id"] for row in out] == ["1", "2", "3"]
    assert all(row["topic.choice"] == "billing" for row in out)


def test_resume_refuses_another_model_api_method_or_extra_body_naming_both_and_goes_on_with_the_same(
    faults: FaultServer, tmp_path: Path, batch_cli: Callable[..., Ran], questions: Path
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    rows = write_rows(tmp_path / "in.jsonl", 6)
    settings = {"--model": "a", "--api": "systemone", "--method": "auto", "--extra-body": '{"seed": 1}'}

    def asked(server: str, **changed: str) -> list[str | Path]:
        flags = {**settings, **{f"--{k.replace('_', '-')}": v for k, v in changed.items()}}
        return [rows, "out.parquet", "--questions", questions, "--base-url", server, *sum(flags.items(), ())]

    first = batch_cli(*asked(gone), "--patience", "0", "--cool-down", "0.01", cwd=tmp_path)  # no restart
    assert first.returncode == 3, first.stderr
    before = posts(faults)
    for changed, said in [
        ({"model": "b"}, "with model 'a', this one asks 'b'"),
        ({"api": "chat_completions"}, "with api 'systemone', this one asks 'chat_completions'"),
        ({"api": "messages", "method": "logprobs"}, "with method 'auto', this one asks 'logprobs'"),
        ({"extra_body": '{"seed": 2}'}, 'with extra_body {"seed": 1}, this one asks {"seed": 2}'),
    ]:
        done = batch_cli(*asked(faults.base_url(), **changed), "--resume", cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert "--resume: the run in out.parquet was made with " in done.stderr and said in done.stderr
    assert posts(faults) == before
    # Another server serving the same model is the same run.
    again = batch_cli(*asked(faults.base_url()), "--resume", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert pq.read_table(tmp_path / "out.parquet").column("id").to_pylist() == list(range(6))


def test_a_runs_manifest_records_the_servers_models_but_never_their_urls_or_keys(tmp_path: Path) -> None:
    from jevper.batch import BatchClassifier, Server
    from jevper.batch._files import Input
    from jevper.batch._local import manifest

    servers = [Server("http://127.0.0.1:9/v1", "m2", api_key="sk-secret"), Server("http://10.0.0.1/v1", "m1")]
    classifier = BatchClassifier(QUESTIONS, servers, api="chat_completions", extra_body={"seed": 1})
    made = json.dumps(manifest(classifier, Input(write_rows(tmp_path / "in.jsonl", 2)), 64))
    assert "sk-secret" not in made and "127.0.0.1" not in made and "10.0.0.1" not in made
    assert json.loads(made)["models"] == ["m1", "m2"] and json.loads(made)["extra_body"] == {"seed": 1}
