"""The documented forms of an upstream's URL, as jevper's own connection (jevper._http) sends them: a query
string stays after the route, credentials in the URL go as basic auth, and credentials in the URL
together with an API key are refused before anything is sent."""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from jevper import AsyncSystemOneClient, Noul
from jevper._http import HTTPClient
from jevper.serve import GatewayConfig
from jevper.serve.config import ConfigError
from jevper.testing.bodies import chat_label
from jevper.testing.loopback import served_on_a_thread


@dataclass
class Seen:
    targets: list[str] = field(default_factory=list)  # the request lines' targets, query included
    authorizations: list[str | None] = field(default_factory=list)


@pytest.fixture
def recorder() -> Iterator[tuple[str, Seen]]:
    """A server that answers every POST with a yes label and records what it was sent."""
    seen = Seen()
    answer = json.dumps(chat_label()).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            seen.targets.append(self.path)
            seen.authorizations.append(self.headers.get("authorization"))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with served_on_a_thread(server):
        yield f"127.0.0.1:{server.server_address[1]}", seen


def ask(sdk: HTTPClient) -> None:
    async def run() -> None:
        try:
            client = AsyncSystemOneClient(sdk, model="m", api="chat_completions", method="logprobs")
            await client.system_one(state="I was charged twice.", questions={"q": Noul("Angry?")})
        finally:
            await sdk.close()

    asyncio.run(run())


def test_a_base_url_with_a_query_string_sends_the_route_before_the_query(recorder: tuple[str, Seen]) -> None:
    host, seen = recorder
    ask(HTTPClient(f"http://{host}/v1?api-version=2024-10-21"))
    assert seen.targets == ["/v1/chat/completions?api-version=2024-10-21"]


def test_a_base_url_with_a_trailing_slash_and_a_query_string_sends_one_slash(
    recorder: tuple[str, Seen],
) -> None:
    host, seen = recorder
    ask(HTTPClient(f"http://{host}/v1/?a=1&b=2"))
    assert seen.targets == ["/v1/chat/completions?a=1&b=2"]


def test_credentials_in_the_url_are_sent_as_basic_auth_when_no_key_is_given(
    recorder: tuple[str, Seen],
) -> None:
    host, seen = recorder
    ask(HTTPClient(f"http://user:s3cret@{host}/v1"))
    assert seen.authorizations == ["Basic " + base64.b64encode(b"user:s3cret").decode()]
    assert seen.targets == ["/v1/chat/completions"]


def test_a_key_without_credentials_in_the_url_is_sent_as_a_bearer_token(recorder: tuple[str, Seen]) -> None:
    host, seen = recorder
    ask(HTTPClient(f"http://{host}/v1", "sk-upstream"))
    assert seen.authorizations == ["Bearer sk-upstream"]


def test_credentials_in_the_url_and_a_key_are_refused_when_the_client_is_made_never_quoted() -> None:
    with pytest.raises(
        ConfigError, match=r"expected the credentials in the URL .* or an API key .*, got both"
    ) as no:
        HTTPClient("http://user:s3cret@127.0.0.1:9/v1", "sk-upstream")
    assert "s3cret" not in str(no.value) and "sk-upstream" not in str(no.value)


def test_the_gateway_refuses_credentials_in_an_upstream_url_with_an_upstream_key_naming_both_flags() -> None:
    with pytest.raises(ConfigError, match=r"^--upstream .* --upstream-api-key: expected") as no:
        GatewayConfig(
            upstream="http://127.0.0.1:9/v1",
            model="m",
            more_upstreams=(("http://user:s3cret@127.0.0.1:10/v1", "m"),),
            upstream_api_key="sk-upstream",
        )
    assert "s3cret" not in str(no.value) and "sk-upstream" not in str(no.value)


def test_the_command_line_refuses_the_combination_with_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    from jevper.serve.cli import main

    argv = ["--upstream", "http://user:s3cret@127.0.0.1:9/v1=m", "--upstream-api-key", "sk-upstream"]
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert "--upstream-api-key: expected" in said and "s3cret" not in said and "sk-upstream" not in said


def test_a_messages_upstream_with_a_query_string_sends_the_route_before_the_query(
    recorder: tuple[str, Seen],
) -> None:
    # Asked through the anthropic SDK, whose base URL is the server's root: the query goes as its
    # default_query. The recorder's answer is not a Messages body; only the request line matters here.
    from jevper import JevperError
    from jevper.serve.app import upstream_client

    host, seen = recorder
    config = GatewayConfig(upstream=f"http://{host}/v1?api-version=2024-10-21", model="m", api="messages")

    async def run() -> None:
        client = upstream_client(config)
        try:
            with pytest.raises(JevperError):
                await client.system_one(state="I was charged twice.", questions={"q": Noul("Angry?")})
        finally:
            await client._client.close()  # type: ignore[attr-defined]

    asyncio.run(run())
    assert seen.targets == ["/v1/messages?api-version=2024-10-21"]
