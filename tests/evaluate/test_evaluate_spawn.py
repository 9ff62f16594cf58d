"""`python -m jevper.evaluate --spawn`: what it would start is checked before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from jevper.evaluate.cli import main

TICKETS = Path(__file__).resolve().parents[1] / "fixtures" / "labelled" / "tickets.csv"
QUESTIONS = TICKETS.with_name("tickets.questions.json")


def spawn(out: Path, *extra: str) -> int:
    return main([str(TICKETS), "--questions", str(QUESTIONS), "--spawn", "--out", str(out), *extra])


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--model", "gpt-5"], "--spawn --model: expected one of ('smollm2', 'qwen2.5-coder-0.5b', "),
        (["--model", "smollm2", "--model", "qwen2.5-coder-0.5b"], "--spawn --model: expected one of"),
        (["--release", "b9999"], "--release: expected one of ('b11549', 'b11434', 'b10434') with --spawn"),
        (["--server", "vllm"], "--server: expected llamacpp with --spawn, got vllm"),
    ],
)
def test_a_spawn_of_what_the_embedded_server_cannot_serve_is_refused_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    assert spawn(tmp_path / "out", *extra) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_spawn_and_server_are_one_choice(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        spawn(tmp_path / "out", "--base-url", "http://127.0.0.1:9/v1")
