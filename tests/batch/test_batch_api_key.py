"""The batch's key and its servers given as URL=MODEL: `--api-key` (or $JEVPER_API_KEY) goes to every
server and nowhere else — not the output, the logs, the journal --resume reads, nor an error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _batch_data import QUESTIONS

from jevper import ConfigError
from jevper.batch.cli import main, parse, servers_of
from jevper.testing.faults import FaultServer

CANARY = "sk-canary-7f3c2a1e9b"
BATCH = ["in.jsonl", "out.jsonl", "--questions", "q.json"]


def test_the_key_given_goes_to_every_server_and_the_environments_when_none_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("JEVPER_API_KEY", raising=False)
    urls = ["--base-url", "http://a:1/v1=m", "--base-url", "http://b:1/v1=m"]
    assert [s.api_key for s in servers_of(parse([*BATCH, *urls, "--api-key", "k1"]), None)] == ["k1", "k1"]
    assert [s.api_key for s in servers_of(parse([*BATCH, *urls]), None)] == [None, None]
    monkeypatch.setenv("JEVPER_API_KEY", "k2")
    assert [s.api_key for s in servers_of(parse([*BATCH, *urls]), None)] == ["k2", "k2"]
    assert CANARY not in repr(servers_of(parse([*BATCH, *urls, "--api-key", CANARY]), None))


def test_a_base_url_names_its_model_split_at_the_first_equals_sign_or_takes_the_models_given() -> None:
    given = ["--base-url", "http://a:1/v1=meta-llama/Llama-3.1-8B", "--base-url", "http://b:1/v1/"]
    servers = servers_of(parse([*BATCH, *given, "--model", "m", "--concurrency", "2"]), None)
    assert [(s.base_url, s.model, s.slots) for s in servers] == [
        ("http://a:1/v1", "meta-llama/Llama-3.1-8B", 2),
        ("http://b:1/v1", "m", 2),
    ]
    with pytest.raises(ConfigError, match=r"--base-url http://b:1/v1: expected a model, got none; write"):
        servers_of(parse([*BATCH, *given]), None)


def test_the_key_is_nowhere_in_what_a_run_writes_or_says(
    faults: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.json").write_text(json.dumps(QUESTIONS))
    rows = [{"id": i, "state": f"ticket {i}"} for i in range(6)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # Half the rows meet a server error, so the errors written are searched too.
    url = faults.base_url("ok", "html-500")
    argv = [*BATCH, "--base-url", f"{url}={faults.model}", "--api", "systemone", "--max-retries", "0"]
    assert main([*argv, "--api-key", CANARY]) == 1
    said = capsys.readouterr()
    written = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert "error" in (tmp_path / "out.jsonl").read_text()
    assert [str(p) for p, data in written.items() if CANARY.encode() in data] == []
    assert CANARY not in said.out + said.err
