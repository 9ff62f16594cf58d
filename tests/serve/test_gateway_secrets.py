"""An upstream URL's password and query values never leave the gateway: not in a failed request's 502, not
in /health's details, not in a log line, not in a /metrics label. Redacted where each message is built
(jevper._http, the pool), so no later site has to remember."""

from __future__ import annotations

import asyncio
import logging

import pytest
from _asgi_gateway import in_process

from jevper._failure import redacted_url
from jevper._http import HTTPClient
from jevper._upstreams import Upstream
from jevper.serve import GatewayConfig, create_app
from jevper.serve.config import ConfigError
from jevper.servers.process import free_port

KEY = "sk-gateway-secrets-51aa"
ONE = {"state": "I was charged twice.", "questions": {"q": {"type": "noul", "instructions": "Angry?"}}}
DECISION = {
    "model": "m",
    "input": "I was charged twice.",
    "questions": [{"type": "predicate", "name": "angry", "instructions": "Is the customer angry?"}],
}
SECRETS = ("secret", "secretvalue")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:secret@127.0.0.1:9/v1", "http://127.0.0.1:9/v1"),
        ("http://user@h/v1", "http://h/v1"),
        ("http://h/v1?key=secretvalue&api-version=2024", "http://h/v1?key=***&api-version=***"),
        ("https://u:secret@h:8443/v1?secretvalue", "https://h:8443/v1?***"),
        ("http://h/v1", "http://h/v1"),
        ("http://u:secret@[::1/v1", "http://[::1/..."),
    ],
)
def test_a_url_is_named_without_its_credentials_or_query_values(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


@pytest.mark.parametrize(
    "url", ["http://user:secret@127.0.0.1:{port}/v1", "http://127.0.0.1:{port}/v1?key=secretvalue"]
)
def test_the_connections_failure_names_the_url_without_its_secret(url: str) -> None:
    sdk = HTTPClient(url.format(port=free_port()))

    async def send() -> BaseException:
        try:
            await sdk.send("POST", "/chat/completions", {"model": "m"}, 5.0)
        except ConnectionError as failed:
            return failed
        finally:
            await sdk.close()
        raise AssertionError("a dead port answered")

    failed = asyncio.run(send())
    assert "127.0.0.1" in str(failed) and "/chat/completions" in str(failed)
    assert not any(secret in str(failed) for secret in SECRETS)


def test_the_pools_messages_name_a_server_without_its_secret() -> None:
    with pytest.raises(ConfigError) as refused:
        Upstream("http://user:secret@h/v1?key=secretvalue", "m", slots=0)
    assert "http://h/v1?key=***" in str(refused.value)
    assert not any(secret in str(refused.value) for secret in SECRETS)


@pytest.mark.parametrize(
    "url", ["http://user:secret@127.0.0.1:{port}/v1", "http://127.0.0.1:{port}/v1?key=secretvalue"]
)
def test_a_gateway_whose_upstream_url_holds_a_secret_never_shows_it(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    dead = url.format(port=free_port())
    # The upstream out for 10 ms, then 20 ms, instead of 1 s and 2 s: what each failure says is checked,
    # not the cool-down (tests/batch/test_batch_upstreams.py::
    # test_a_servers_cool_down_doubles_with_each_failure_in_a_row_up_to_its_cap).
    config = GatewayConfig(
        upstream=dead,
        model="m",
        api="chat_completions",
        api_keys=(KEY,),
        timeout=5.0,
        retry_after_s=0,
        cool_down_s=0.01,
    )
    auth = {"authorization": f"Bearer {KEY}"}

    async def run() -> list[str]:
        said = []
        async with in_process(create_app(config), headers=auth) as gateway:
            # Until the upstream is out and every request is a 503, then /health with its details.
            for _ in range(4):
                said.append((await gateway.post("/v1/systemone", json=ONE)).text)
                said.append((await gateway.post("/v1/decisions", json=DECISION)).text)
            health = await gateway.get("/health")
            said.append(health.text)
            assert health.json()["upstream_details"][0]["last_error"]
            said.append((await gateway.get("/metrics")).text)
        return said

    with caplog.at_level(logging.DEBUG):
        said = asyncio.run(run())
    bodies = "\n".join(said)
    assert '"upstream_error"' in bodies  # the failure was told, as a 502, before the upstream was out
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "127.0.0.1" in logged
    for secret in SECRETS:
        assert secret not in bodies
        assert secret not in logged
    # Labelled by the upstream's position (its URL is withheld from /health's public part too).
    assert 'jevper_serve_upstream_requests_total{status="none",upstream="0"}' in said[-1]
    assert "127.0.0.1" not in said[-1]
