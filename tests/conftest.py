"""Shared fixtures: the embedded llama.cpp server, started once per session for the live tests; the CA the
tests' HTTP clients trust."""

from __future__ import annotations

import gc
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from jevper.servers import SpawnedServer
from jevper.servers.llamacpp import RECIPE_ARGS, spawn_llamacpp


@pytest.fixture(scope="session")
def _loopback_ca() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="jevper-tests-ca-"))
    try:
        bundle = folder / "ca.pem"
        trustme.CA().cert_pem.write_to_path(str(bundle))
        yield bundle
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _offline_trust(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    # An offline test reaches loopback alone (--block-network), where no public CA is needed; but each SDK
    # client it makes loads the system's public CAs into a new SSL context, about 20 ms of a core each,
    # over a thousand times a run. It trusts one CA of the run's own instead (a test of TLS names its own).
    # Live tests keep the system's: a tool they install downloads from the registry.
    if request.node.get_closest_marker("live") is None:
        monkeypatch.setenv("SSL_CERT_FILE", str(request.getfixturevalue("_loopback_ca")))


@pytest.fixture(scope="session")
def llamacpp() -> Iterator[SpawnedServer]:
    """The embedded llama.cpp (b11549 through xllamacpp, SmolLM2-135M-Instruct) on a free loopback port,
    with the reference recipe and its default threads (tests/_llama.py says why)."""
    with spawn_llamacpp(extra_args=RECIPE_ARGS) as server:
        yield server


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--live",
        choices=("llamacpp", "vllm"),
        default="llamacpp",
        help="the real server behind the `live_server` fixture: the embedded llama.cpp (default; starts "
        "in a second) or vLLM on the CPU (builds ~3.4 GB once, then 45-90 s to start)",
    )


@pytest.fixture(scope="session")
def live_server(request: pytest.FixtureRequest) -> Iterator[SpawnedServer]:
    """The server `--live` names, started once per session on a free loopback port."""
    if request.config.getoption("--live") == "vllm":
        from jevper.servers.vllm import spawn_vllm

        with spawn_vllm() as server:
            yield server
    else:
        yield request.getfixturevalue("llamacpp")


# A test process holds what collection imported (both SDKs' types, pyarrow, the project) for the whole
# session, and the tests add long-lived caches (parsed cassettes, syntax trees); the collector's full
# passes walked all of it again and again. What collection left is frozen, out of the collector's reach,
# and a full pass waits for four times as many younger collections as by default.
gc.set_threshold(700, 10, 40)


def pytest_collection_finish() -> None:
    gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_terminal_summary() -> None:
    # Back within the collector's reach before the summary: a plugin importing a library there may ask it
    # who refers to an object (hypothesis, on the PRNGs registered at its import), which a frozen
    # referrer does not answer.
    gc.unfreeze()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure() -> None:
    """The session's last step, after pytest's own last collection (which reports what the tests left):
    the heap frozen, so that the interpreter's exit does not walk it again. A worker of the offline suite
    holds a few hundred thousand objects by then and its exit collected them several times over, four
    workers at once on the two cores while the run waited for them."""
    gc.freeze()


@pytest.fixture(scope="session")
def vcr_config() -> dict[str, object]:
    return {
        "filter_headers": ["authorization", "x-api-key", "api-key", "cookie", "set-cookie"],
        "decode_compressed_response": True,
    }
