"""Client-test fixtures: a loopback HTTP server that answers with recorded or transcribed bodies, and
the cassette settings for the client-level recordings of the embedded llama.cpp."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jevper.testing.faults import Script, running

FIXTURES = Path(__file__).parents[1] / "fixtures" / "client"


@dataclass
class Loopback(Script):
    """The fault server in scripted mode: each POST path answers with the bodies queued for it, in order."""

    url: str = ""  # ends in /v1


@pytest.fixture
def loopback() -> Iterator[Loopback]:
    state = Loopback()
    with running(script=state) as server:
        state.url = server.base_url()
        yield state


def transcribed(name: str) -> dict[str, Any]:
    """A body transcribed from the reference document (provenance inside the file)."""
    cases: dict[str, dict[str, Any]] = json.loads((FIXTURES / "wire" / "transcribed.json").read_text())
    return cases[name]


def recorded(name: str) -> dict[str, Any]:
    """A body recorded from the embedded llama.cpp by tests/fixtures/client/record_wire.py."""
    record: dict[str, Any] = json.loads((FIXTURES / "wire" / f"llamacpp_{name}.json").read_text())
    return record


def systemone(name: str) -> dict[str, Any]:
    """A System One exchange recorded from callo or llama.cpp by tests/fixtures/client/record_systemone.py."""
    record: dict[str, Any] = json.loads((FIXTURES / "systemone" / f"{name}.json").read_text())
    return record


@pytest.fixture
def fixtures() -> Any:
    """Recorded and transcribed bodies: ``fixtures.recorded(name)``, ``fixtures.transcribed(name)``,
    ``fixtures.systemone(name)``."""

    return SimpleNamespace(recorded=recorded, transcribed=transcribed, systemone=systemone)


@pytest.fixture(scope="module")
def vcr_cassette_dir() -> str:
    return str(FIXTURES / "cassettes")


@pytest.fixture(scope="module")
def vcr_config() -> dict[str, object]:
    # The embedded server listens on a fresh port each run, so replay matches on what was asked.
    return {
        "filter_headers": ["authorization", "x-api-key", "api-key", "cookie", "set-cookie"],
        "decode_compressed_response": True,
        "match_on": ["method", "path", "body"],
    }
