"""Live (marker `live`): the dry run's prompt tokens, counted by the embedded llama.cpp's own tokenizer,
against what the real run then reports row by row (the output's usage column), on the same rows."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _batch_data import QUESTIONS

from jevper.batch.cli import main
from jevper.servers import SpawnedServer

pytestmark = pytest.mark.live

TICKETS = [
    "I was charged twice for my subscription this month and I need the money back today.",
    "The app crashes when I open the settings page.",
    "This is the third time I write: refund me or I cancel everything!",
    "My invoice shows a fee I do not recognise.",
    "Where is my parcel? It was due on Monday.",
    "Please change the e-mail address on my account.",
]


def test_the_dry_runs_token_count_is_within_one_percent_of_what_the_run_reports(
    llamacpp: SpawnedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "questions.json").write_text(json.dumps(QUESTIONS))
    rows = [{"id": i, "state": TICKETS[i % len(TICKETS)]} for i in range(2 * len(TICKETS))]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    asked = ["in.jsonl", "out.parquet", "--questions", "questions.json"]
    asked += ["--base-url", f"{llamacpp.base_url}={llamacpp.model}", "--api", "chat_completions"]
    capsys.readouterr()
    assert main([*asked, "--dry-run=count"]) == 0
    said = capsys.readouterr().out
    assert f"{len(rows)} rows, {len(TICKETS)} distinct, 0 answered from the cache" in said
    found = re.search(r"jevper\.batch: (\d+) prompt tokens, counted by the server's tokenizer", said)
    assert found, said
    counted = int(found.group(1))
    assert not (tmp_path / "out.parquet").exists()
    assert main(asked) == 0
    usage = pq.read_table(tmp_path / "out.parquet").column("usage").to_pylist()
    reported = sum(u["input_tokens"] for u in usage)
    assert abs(counted - reported) <= 0.01 * reported, (counted, reported)
    print(f"dry run {counted} prompt tokens, the run reported {reported}")
