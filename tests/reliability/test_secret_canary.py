"""A canary API key sent as Authorization and x-api-key reaches the server and no file that is written:
the probe harness's recording, and a client cassette recorded with the project's vcr_config."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest
import vcr

from jevper import Choice, IncompleteAnswerError, LabelReadoutError, MalformedAnswerError, SystemOneClient
from jevper.probe import cli
from jevper.probe.cassettes import load_exchanges
from jevper.servers import SpawnedServer
from jevper.servers.llamacpp import RECIPE_ARGS, spawn_llamacpp

pytestmark = pytest.mark.live

CANARY = f"sk-jevper-canary-{uuid.uuid4().hex}"
#: This anthropic SDK sends its key as a bearer token; x-api-key is added so both headers carry it.
HEADERS = {"x-api-key": CANARY}
QUESTION = {"intent": Choice(criteria={"billing": "money, invoices", "technical": "errors, crashes"})}
#: A spread of the catalogue: each surface, its refusals (bad model, bad route) and a two-request probe.
PROBES = ("chat-logprobs", "chat-bad-model", "chat-bad-path", "responses-logprobs", "messages-*")


@pytest.fixture(scope="module")
def keyed() -> Iterator[SpawnedServer]:
    with spawn_llamacpp(api_key=CANARY, extra_args=RECIPE_ARGS) as server:
        yield server


def _files_holding(root: Path, secret: str) -> list[Path]:
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files, f"nothing was written under {root}"
    return [p for p in files if secret.encode() in p.read_bytes()]


def test_the_keyed_server_refuses_a_request_without_the_key(keyed: SpawnedServer) -> None:
    client = openai.OpenAI(base_url=keyed.base_url, api_key="not-the-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=keyed.model, messages=[{"role": "user", "content": "hi"}])


def test_a_probe_run_with_a_canary_key_writes_it_nowhere(
    keyed: SpawnedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    only = [arg for probe_id in PROBES for arg in ("--only", probe_id)]
    argv = ["--server", "llamacpp", "--base-url", keyed.base_url, "--api-key", CANARY]
    status = cli.main([*argv, "--release", keyed.version, "--out", str(out), *only])
    printed = capsys.readouterr()
    assert status == cli.EXIT_OK, printed.err
    assert _files_holding(out, CANARY) == []
    assert CANARY not in printed.out + printed.err


def _ask(client: SystemOneClient) -> None:
    # A 135M model's answer may not parse; the exchange is what is under test.
    with contextlib.suppress(IncompleteAnswerError, LabelReadoutError, MalformedAnswerError):
        client.system_one(state="I was charged twice.", questions=QUESTION)


def _record(recorder: vcr.VCR, cassette: Path, server: SpawnedServer) -> None:
    with recorder.use_cassette(str(cassette)):
        chat = openai.OpenAI(base_url=server.base_url, api_key=CANARY, max_retries=0, default_headers=HEADERS)
        for api in ("chat_completions", "responses"):
            _ask(SystemOneClient(chat, model=server.model, api=api, method="logprobs", timeout=60))
        messages = anthropic.Anthropic(
            base_url=server.base_url.removesuffix("/v1"), api_key=CANARY, default_headers=HEADERS
        )
        _ask(SystemOneClient(messages, model=server.model, api="messages", timeout=60))
    recorded = load_exchanges(cassette)
    paths = {exchange.uri.rsplit("/v1", 1)[-1] for exchange in recorded}
    assert paths == {"/chat/completions", "/responses", "/messages"}
    # Every request was let in (a 400 is the server refusing a field, not the key): the key travelled.
    codes = {exchange.status for exchange in recorded}
    assert 200 in codes and not codes & {401, 403}


def test_a_client_cassette_recorded_with_the_project_vcr_config_holds_no_canary(
    keyed: SpawnedServer, tmp_path: Path, vcr_config: dict[str, object]
) -> None:
    recorder = vcr.VCR(record_mode="all", **vcr_config)  # type: ignore[arg-type]
    _record(recorder, tmp_path / "canary.yaml", keyed)
    assert _files_holding(tmp_path, CANARY) == []


def test_the_canary_search_finds_the_key_when_nothing_filters_it(
    keyed: SpawnedServer, tmp_path: Path
) -> None:
    # The control: a recording without the header filters does hold the key, in both headers.
    with vcr.VCR(record_mode="all").use_cassette(str(tmp_path / "unfiltered.yaml")):
        hi = [{"role": "user", "content": "hi"}]
        openai.OpenAI(
            base_url=keyed.base_url, api_key=CANARY, default_headers=HEADERS
        ).chat.completions.create(model=keyed.model, messages=hi, max_tokens=1)
        root = keyed.base_url.removesuffix("/v1")
        anthropic.Anthropic(base_url=root, api_key=CANARY, default_headers=HEADERS).messages.create(
            model=keyed.model, messages=hi, max_tokens=1
        )
    assert _files_holding(tmp_path, CANARY) == [tmp_path / "unfiltered.yaml"]
    sent = [exchange.request_headers for exchange in load_exchanges(tmp_path / "unfiltered.yaml")]
    for headers in sent:
        assert headers["authorization"] == f"Bearer {CANARY}" and headers["x-api-key"] == CANARY
