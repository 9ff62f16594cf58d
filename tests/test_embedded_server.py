from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from jevper.probe.spawn import KEEP_LOGS, SpawnedServer, embedded_binary, embedded_model_path, new_log


def test_the_embedded_binary_reports_its_release_from_the_wheel_version() -> None:
    binary = embedded_binary()
    assert binary.version.startswith("b")
    assert binary.version[1:].isdigit()
    assert binary.path.is_file()


def test_the_embedded_model_is_an_f16_gguf_converted_once() -> None:
    first = embedded_model_path()
    assert first.read_bytes()[:4] == b"GGUF"
    assert embedded_model_path() == first


@pytest.mark.live
def test_the_embedded_server_answers_chat_completions_with_logprobs(llamacpp: SpawnedServer) -> None:
    reply = httpx.post(
        f"{llamacpp.base_url}/chat/completions",
        json={
            "model": llamacpp.model,
            "messages": [{"role": "user", "content": "Say yes."}],
            "max_tokens": 2,
            "logprobs": True,
            "top_logprobs": 3,
        },
        timeout=30,
    )
    assert reply.status_code == 200
    entry = reply.json()["choices"][0]["logprobs"]["content"][0]
    assert len(entry["top_logprobs"]) == 3
    assert entry["logprob"] <= 0.0


def test_a_new_server_log_leaves_only_the_newest_earlier_logs_of_its_kind(tmp_path: Path) -> None:
    for i in range(8):
        log = tmp_path / f"llama-server-{1000 + i}.log"
        log.write_text(str(i))
        os.utime(log, (1_000_000 + i, 1_000_000 + i))
    other = tmp_path / "vllm-serve-7.log"
    other.write_text("another kind")
    path = new_log(tmp_path, "llama-server", 2000)
    assert path == tmp_path / "llama-server-2000.log" and not path.exists()
    kept = sorted(p.name for p in tmp_path.glob("llama-server-*.log"))
    # With the new one, KEEP_LOGS logs of this kind remain: the newest earlier ones.
    assert kept == [f"llama-server-{1000 + i}.log" for i in range(8 - (KEEP_LOGS - 1), 8)]
    assert other.exists()
