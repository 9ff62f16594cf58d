from __future__ import annotations

import httpx
import pytest

from jevper.probe.spawn import SpawnedServer, embedded_binary, embedded_model_path


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
