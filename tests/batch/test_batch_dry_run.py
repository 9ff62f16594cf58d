"""``--dry-run`` against the fault server, which has no tokenizer: the rows, the distinct rows, the cache
hits and the requests per server are said, the prompt tokens are labelled an estimate, ``=count`` asks no
question, a bare ``--dry-run`` asks only its sample and says so, and OUTPUT is never written."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from _batch_data import QUESTIONS

from jevper.batch.cli import main
from jevper.testing.faults import FaultServer, running

QUESTION_ROUTES = ("/v1/chat/completions", "/v1/systemone")


def questions_sent(server: FaultServer) -> int:
    return sum(
        1 for served in server.log if served.method == "POST" and served.path.endswith(QUESTION_ROUTES)
    )


@pytest.fixture
def run_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., tuple[int, list[str]]]:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "questions.json").write_text(json.dumps(QUESTIONS))
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"id": i, "state": f"ticket {i % 4}"}) + "\n" for i in range(12))
    )

    def run(*args: str) -> tuple[int, list[str]]:
        capsys.readouterr()
        status = main(["in.jsonl", "out.parquet", "--questions", "questions.json", *args])
        return status, capsys.readouterr().out.splitlines()

    return run


def test_count_asks_no_question_and_says_what_the_run_would_send(
    run_cli: Callable[..., tuple[int, list[str]]], tmp_path: Path
) -> None:
    with running() as one, running() as two:
        servers = [
            "--base-url",
            f"{one.base_url()}=fault-model",
            "--base-url",
            f"{two.base_url()}=fault-model",
        ]
        status, said = run_cli(
            *servers,
            "--concurrency",
            "1",
            "--concurrency",
            "3",
            "--api",
            "chat_completions",
            "--dry-run=count",
        )
        assert status == 0 and questions_sent(one) + questions_sent(two) == 0
    assert said[0] == "jevper.batch: dry run: 12 rows, 4 distinct, 0 answered from the cache, 4 to ask"
    # Three questions a row on a prompt surface: 12 requests, split by the servers' slots.
    assert said[1] == f"jevper.batch: 12 requests it would send ({one.base_url()} 3, {two.base_url()} 9)"
    assert re.fullmatch(
        r"jevper\.batch: about \d+ prompt tokens: an estimate \(4 characters a token\), since the server "
        r"counts none \(no /tokenize\)",
        said[2],
    )
    assert said[3] == "jevper.batch: time: not measured (--dry-run=count asks no question)"
    assert not (tmp_path / "out.parquet").exists()


def test_cache_hits_are_not_counted_as_requests(run_cli: Callable[..., tuple[int, list[str]]]) -> None:
    with running() as server:
        asked = [
            "--base-url",
            f"{server.base_url()}=fault-model",
            "--api",
            "systemone",
            "--cache",
            "a.sqlite",
        ]
        (Path("half.jsonl")).write_text(
            "".join(json.dumps({"id": i, "state": f"ticket {i}"}) + "\n" for i in range(2))
        )
        assert main(["half.jsonl", "half.parquet", "--questions", "questions.json", *asked]) == 0
        before = questions_sent(server)
        status, said = run_cli(*asked, "--dry-run=count")
        assert status == 0 and questions_sent(server) == before
    assert said[0] == "jevper.batch: dry run: 12 rows, 4 distinct, 2 answered from the cache, 2 to ask"
    assert (
        said[1] == f"jevper.batch: 2 requests it would send ({server.base_url()} 2)"
    )  # System One: one a row


def test_a_bare_dry_run_asks_its_sample_alone_and_says_what_it_spent(
    run_cli: Callable[..., tuple[int, list[str]]], tmp_path: Path
) -> None:
    with running() as server:
        status, said = run_cli(
            "--base-url", f"{server.base_url()}=fault-model", "--api", "systemone", "--dry-run"
        )
        assert status == 0
        sent = questions_sent(server)
    assert sent == 4  # the four distinct rows are the whole sample here: one System One request each
    assert re.fullmatch(
        r"jevper\.batch: time: about \d+ s for the 0 rows left, at the sample's [\d.]+ rows/s; the sample "
        r"cost 4 rows, 4 requests and [\d.]+ s \(its answers go to the cache, if one is given, and "
        r"nowhere else\)",
        said[3],
    )
    assert not (tmp_path / "out.parquet").exists()
