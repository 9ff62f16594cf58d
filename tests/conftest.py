"""Shared fixtures: the embedded llama.cpp server, started once per session for the live tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jevper.probe.spawn import SpawnedServer, spawn_llamacpp


@pytest.fixture(scope="session")
def llamacpp() -> Iterator[SpawnedServer]:
    """The embedded llama-server (b10434, SmolLM2-135M-Instruct) on a free loopback port."""
    with spawn_llamacpp() as server:
        yield server


@pytest.fixture(scope="session")
def vcr_config() -> dict[str, object]:
    return {
        "filter_headers": ["authorization", "x-api-key", "api-key", "cookie", "set-cookie"],
        "decode_compressed_response": True,
    }
