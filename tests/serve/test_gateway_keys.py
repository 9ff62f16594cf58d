"""The gateway's keys: a blank key is refused at start-up (never a key that every request matches), the
variable's keys are stripped, and only a token equal to a key is let in (not one that starts with it,
nor one it starts with)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from jevper.serve import GatewayConfig, create_app
from jevper.serve.cli import KEYS_ENV, client_keys, main
from jevper.serve.config import ConfigError
from jevper.servers.process import free_port
from jevper.testing.faults import FaultServer

KEY = "sk-gateway-keys-7c1e"
OTHER = "sk-second-key-d402"
ONE = {"state": "I was charged twice.", "questions": {"q": {"type": "noul", "instructions": "Angry?"}}}


@pytest.fixture
def keyed(upstream: FaultServer) -> Iterator[TestClient]:
    config = GatewayConfig(upstream=upstream.base_url(), model="smollm2", api_keys=(KEY, OTHER))
    with TestClient(create_app(config)) as client:
        yield client


@pytest.mark.parametrize(
    "token",
    [
        KEY + "x",  # a configured key with characters appended: it starts with the key
        KEY + KEY,
        OTHER + " ",
        KEY[:-1],  # a prefix of a key
        KEY[:1],
        "",
    ],
)
@pytest.mark.parametrize("header", ["authorization", "x-api-key"])
def test_only_a_token_equal_to_a_key_is_let_in_never_one_that_starts_with_it_or_a_prefix_of_it(
    keyed: TestClient, token: str, header: str
) -> None:
    value = f"Bearer {token}" if header == "authorization" else token
    for route in ("/v1/systemone", "/v1/decisions"):
        refused = keyed.post(route, json=ONE, headers={header: value})
        assert refused.status_code == 401, (route, header, token, refused.text)
    assert keyed.get("/v1/models", headers={header: value}).status_code == 401


def test_each_of_the_keys_is_let_in_whole(keyed: TestClient) -> None:
    for key in (KEY, OTHER):
        assert keyed.post("/v1/systemone", json=ONE, headers={"x-api-key": key}).status_code == 200
        assert keyed.get("/v1/models", headers={"authorization": f"Bearer {key}"}).status_code == 200


@pytest.mark.parametrize("key", ["", " ", "\t"])
def test_a_gateway_cannot_be_made_with_a_blank_key(upstream: FaultServer, key: str) -> None:
    with pytest.raises(ConfigError, match=r"^--api-key: expected a key"):
        GatewayConfig(upstream=upstream.base_url(), model="smollm2", api_keys=(KEY, key))


@pytest.mark.parametrize("key", [" sk-padded", "sk-padded\n", "sk-\x00null", "sk-ünï"])
def test_a_key_no_request_could_send_is_refused_and_never_quoted(upstream: FaultServer, key: str) -> None:
    with pytest.raises(ConfigError, match=r"^--api-key: expected a key of printable ASCII") as refused:
        GatewayConfig(upstream=upstream.base_url(), model="smollm2", api_keys=(key,))
    assert "sk-" not in str(refused.value)


@pytest.mark.parametrize("given", [[""], ["   "], [KEY, ""]])
def test_an_empty_or_blank_api_key_flag_exits_2_naming_it_before_anything_starts(
    given: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)
    argv = ["--upstream", "http://127.0.0.1:9/v1", "--model", "m", "--port", str(free_port())]
    for key in given:
        argv += ["--api-key", key]
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert "python -m jevper.serve: --api-key: expected a key, got an empty one" in said
    assert KEY not in said


def test_the_command_line_with_an_unset_variable_as_its_key_exits_2() -> None:
    # As `python -m jevper.serve --api-key "$GATEWAY_KEY"` runs with the variable unset: a subprocess, so a
    # gateway that starts serving instead fails by its time-out.
    command = [sys.executable, "-m", "jevper.serve", "--upstream", "http://127.0.0.1:9/v1", "--model", "m"]
    command += ["--api-key", "", "--port", str(free_port())]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "--api-key: expected a key, got an empty one" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_variables_keys_are_stripped_and_blank_ones_dropped() -> None:
    assert client_keys([], {KEYS_ENV: f"{KEY}, {OTHER} ,,  "}) == (KEY, OTHER)
    assert client_keys([KEY], {KEYS_ENV: f" {OTHER}\n"}) == (KEY, OTHER)
    assert client_keys([KEY], {}) == (KEY,)
    assert client_keys([], {}) == ()


@pytest.mark.parametrize("value", ["", " ", " , ,"])
def test_a_variable_set_to_no_key_is_refused_never_read_as_asking_for_none(value: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{KEYS_ENV}: expected one or more keys, comma-separated"):
        client_keys([], {KEYS_ENV: value})


def test_a_key_after_a_comma_and_a_space_in_the_variable_is_let_in(
    upstream: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = client_keys([], {KEYS_ENV: f"{KEY}, {OTHER}"})
    config = GatewayConfig(upstream=upstream.base_url(), model="smollm2", api_keys=keys)
    with TestClient(create_app(config)) as client:
        assert client.post("/v1/systemone", json=ONE, headers={"x-api-key": OTHER}).status_code == 200
