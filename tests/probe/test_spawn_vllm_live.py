"""The server `--live` names (llama.cpp by default, vLLM with `--live vllm`) answers like a real one.

CI runs these against the embedded llama.cpp; `scripts/test --live vllm` runs the same tests against
vLLM 0.32.0 on the CPU, which `spawn_vllm` builds on first use.
"""

from __future__ import annotations

import httpx
import pytest
from openai import OpenAI

from jevper.servers import SpawnedServer

pytestmark = pytest.mark.live

QUESTION = [
    {"role": "system", "content": "Answer with the letter of one option only."},
    {
        "role": "user",
        "content": "I was charged twice this month. Which team?\nA: billing\nB: technical\nC: sales",
    },
]


def test_the_live_server_says_which_release_it_is_without_machine_paths(live_server: SpawnedServer) -> None:
    assert live_server.base_url.startswith("http://127.0.0.1:") and live_server.base_url.endswith("/v1")
    assert live_server.version and live_server.server in ("llamacpp", "vllm")
    assert not any(part.startswith("/") for part in live_server.command)
    listed = httpx.get(f"{live_server.base_url}/models", timeout=10.0).json()
    assert live_server.model in [entry["id"] for entry in listed["data"]]


def test_the_live_server_returns_twenty_alternatives_for_the_answer_token(live_server: SpawnedServer) -> None:
    client = OpenAI(base_url=live_server.base_url, api_key="local", max_retries=0)

    reply = client.chat.completions.create(
        model=live_server.model,
        messages=QUESTION,  # type: ignore[arg-type]
        logprobs=True,
        top_logprobs=20,
        max_tokens=2,
        temperature=0,
    )

    content = reply.choices[0].logprobs.content if reply.choices[0].logprobs else None
    assert content, "the server sent no logprobs"
    alternatives = [entry.token.strip() for entry in content[0].top_logprobs]
    assert len(alternatives) == 20
    assert {"A", "B", "C"} & set(alternatives)


def test_the_live_server_is_deterministic_at_temperature_zero(live_server: SpawnedServer) -> None:
    body = {"model": live_server.model, "messages": QUESTION, "max_tokens": 8, "temperature": 0}

    first, second = (
        httpx.post(f"{live_server.base_url}/chat/completions", json=body, timeout=120.0).json()
        for _ in range(2)
    )

    assert first["choices"][0]["message"]["content"] == second["choices"][0]["message"]["content"]
