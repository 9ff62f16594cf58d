"""The batch core's connection (jevper._http, over aiohttp) against the fault server: every fault
ends in the error the openai SDK's path gives, after as many requests; the body, the key and the proxy
are the SDK's; a kept connection the server closes is asked again on a new one; a key that cannot travel
as a header is refused before any byte is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
from typing import Any

import openai
import pytest

from jevper import AsyncSystemOneClient, Choice, ConfigError, JevperError, Noul, ProviderError, Score
from jevper._http import HTTPClient
from jevper._native import question_body
from jevper.testing.faults import FAULTS, FaultServer, running
from jevper.testing.script import Script
from jevper.testing.systemone import SystemOneAnswer

TIMEOUT = 1.0
QUESTIONS = {
    "intent": Choice(criteria={"billing": "money", "technical": None, "sales": "pricing"}),
    "angry": Noul("Is the customer angry?"),
    "urgency": Score(["can wait", "today", "now"]),
}
NOUL_ANSWER = {
    "answers": {"angry": {"type": "noul", "noul": 0.5}},
    "usage": {"input_tokens": 9, "output_tokens": 1},
}
#: The faults that take the whole timeout, or the body's whole size, before they end.
SLOW = {"hang-no-bytes", "hang-after-headers", "slow-drip", "slow-drip-error", "huge-body"}
#: Those that end at the timeout, whatever it is: asked with a short one.
HANGS, HANG_TIMEOUT = SLOW - {"huge-body"}, 0.3


def outcome(sdk: Any, api: str) -> tuple[str, str | None, int | None, str]:
    """What one call ends in: "answered" and the answers, or the error's type, kind, status and message.
    System One is asked the three questions in one request; a chat surface one question, so that the
    requests it sends do not depend on which of several questions fails first."""
    asked = QUESTIONS if api == "systemone" else {"intent": QUESTIONS["intent"]}

    async def ask() -> tuple[str, str | None, int | None, str]:
        fault = str(sdk.base_url).split("/fault/")[-1].split("/")[0]
        timeout = 30.0 if fault == "huge-body" else HANG_TIMEOUT if fault in HANGS else TIMEOUT
        client = AsyncSystemOneClient(sdk, model="fault-model", api=api, timeout=timeout)
        try:
            answered = await client.system_one(state="I was charged twice.", questions=asked)
        except JevperError as error:
            kind = error.kind if isinstance(error, ProviderError) else None
            status = error.status if isinstance(error, ProviderError) else None
            return type(error).__name__, kind, status, str(error)
        finally:
            await sdk.close()
        return "answered", None, None, json.dumps(answered.to_api()["answers"], sort_keys=True)

    return asyncio.run(ask())


@pytest.mark.parametrize("api", ["systemone", "chat_completions"])
@pytest.mark.parametrize("fault", sorted(set(FAULTS) - {"crash"}))
def test_each_fault_ends_as_it_does_through_the_openai_sdk_after_as_many_requests(
    faults: FaultServer, fault: str, api: str
) -> None:
    url = faults.base_url(fault)
    seen = len(faults.log)
    through_sdk = outcome(openai.AsyncOpenAI(base_url=url, api_key="local", max_retries=0), api)
    sdk_requests = len(faults.log) - seen
    started = time.monotonic()
    ours = outcome(HTTPClient(url, "local"), api)
    took = time.monotonic() - started
    our_requests = len(faults.log) - seen - sdk_requests
    assert ours[:3] == through_sdk[:3], f"ours: {ours}\nthe SDK's: {through_sdk}"
    assert our_requests == sdk_requests
    if ours[0] == "answered":
        assert ours[3] == through_sdk[3]
    else:
        assert "expected" in ours[3], ours[3]
    assert took < (30.0 if fault == "huge-body" else TIMEOUT + 2.0)


def test_a_dead_server_is_unreachable_in_the_sdks_words() -> None:
    with running() as server:
        url = server.base_url()
    ours = outcome(HTTPClient(url), "systemone")
    assert ours[:3] == ("ProviderError", "unreachable", None)
    assert "could not be reached" in ours[3]


def test_the_request_is_the_sdks_body_with_its_bearer_key_and_none_without_one() -> None:
    script = Script()
    answer = {
        "answers": {"angry": {"type": "noul", "noul": 0.25}},
        "usage": {"input_tokens": 9, "output_tokens": 1},
    }
    for _ in range(3):
        script.reply("/systemone", 200, answer)
    with running(script=script) as server:
        url = server.base_url()
        outcome(openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0), "systemone")
        outcome(HTTPClient(url, "sk-test"), "systemone")
        outcome(HTTPClient(url), "systemone")
    sdk, keyed, keyless = script.requests
    assert json.loads(keyed.body) == json.loads(sdk.body)
    assert keyed.headers["authorization"] == sdk.headers["authorization"] == "Bearer sk-test"
    assert "authorization" not in keyless.headers
    assert keyed.headers["content-type"] == "application/json"


def test_an_error_status_keeps_its_retry_after_for_the_pool() -> None:
    script = Script()
    script.reply("/systemone", 429, {"error": {"message": "slow down"}}, headers=[("retry-after", "7")])
    with running(script=script) as server:

        async def ask() -> ProviderError:
            sdk = HTTPClient(server.base_url())
            client = AsyncSystemOneClient(sdk, model="fault-model", api="systemone", timeout=TIMEOUT)
            try:
                await client.system_one(state="x", questions=QUESTIONS)
            except ProviderError as error:
                return error
            finally:
                await sdk.close()
            raise AssertionError("a 429 was answered")

        error = asyncio.run(ask())
    assert (error.status, error.retry_after) == (429, 7.0)
    assert "slow down" in str(error)


Handler = Any  # (method, target, headers, body) -> the raw bytes of the answer


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    line, *fields = head.split("\r\n")[:-2]
    method, target, _ = line.split(" ")
    headers = {k.strip().lower(): v.strip() for k, v in (f.split(":", 1) for f in fields)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return method, target, headers, body


class _Raw:
    """A loopback server answering each request with what ``handler`` makes of it; it keeps the requests."""

    def __init__(self, handler: Handler, tls: Any = None) -> None:
        self.handler = handler
        self.tls = tls
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.connections = 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                request = await _read_request(reader)
                self.requests.append(request)
                answer = self.handler(*request)
                writer.write(answer)
                await writer.drain()
                if b"\r\nconnection: close\r\n" in answer.split(b"\r\n\r\n", 1)[0] + b"\r\n":
                    break
        writer.close()


def _answer(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


NOUL_BYTES = json.dumps(NOUL_ANSWER).encode()


class _ClosesKeptConnections:
    """A server that answers the first request on each connection and closes the connection, without a
    word, when a second one arrives on it: what a server does that closes an idle connection just as
    the client sends on it. With ``answering=False`` it closes every connection on its first request."""

    def __init__(self, answering: bool = True) -> None:
        self.answering = answering
        self.answered = 0
        self.dropped = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = True
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                await _read_request(reader)
                if not (first and self.answering):
                    self.dropped += 1
                    break
                first = False
                self.answered += 1
                writer.write(_answer(NOUL_BYTES, "content-type: application/json"))
                await writer.drain()
        writer.close()


async def _in_turn(url: str, rows: int) -> list[float | ProviderError]:
    """Each row's noul, or its error, asked one after another at ``url``."""
    sdk = HTTPClient(url)
    client = AsyncSystemOneClient(sdk, model="m", api="systemone", timeout=TIMEOUT)
    found: list[float | ProviderError] = []
    try:
        for i in range(rows):
            try:
                answered = await client.system_one(state=f"row {i}", questions={"angry": QUESTIONS["angry"]})
            except ProviderError as error:
                found.append(error)
            else:
                found.append(answered.answers["angry"].noul)  # type: ignore[union-attr]
        return found
    finally:
        await sdk.close()


def _ask_in_turn(server: _ClosesKeptConnections, rows: int) -> list[float | str]:
    """Each row's noul, or its error's kind, asked one after another."""

    async def ask() -> list[float | str]:
        listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = listening.sockets[0].getsockname()[1]
        try:
            found = await _in_turn(f"http://127.0.0.1:{port}/v1", rows)
        finally:
            listening.close()
        return [f.kind if isinstance(f, ProviderError) else f for f in found]

    return asyncio.run(ask())


def test_a_kept_connection_the_server_closes_is_asked_again_on_a_new_one() -> None:
    server = _ClosesKeptConnections()
    assert _ask_in_turn(server, 5) == [0.5] * 5
    assert server.answered == 5
    assert server.dropped >= 1  # the client did send on kept connections, and recovered each time


def test_a_new_connection_closed_without_an_answer_is_not_asked_again() -> None:
    server = _ClosesKeptConnections(answering=False)
    assert _ask_in_turn(server, 1) == ["unreachable"]
    assert server.dropped == 1


def test_a_redirect_is_followed_as_the_sdk_follows_it() -> None:
    script = Script()
    asked = {qid: question_body(q) for qid, q in QUESTIONS.items()}
    answer = SystemOneAnswer({"questions": asked}, "fault-model").body()
    for _ in range(2):
        script.reply("/systemone", 307, "", headers=[("location", "/v1/moved/systemone")])
        script.reply("/moved/systemone", 200, answer)
    with running(script=script) as server:
        url = server.base_url()
        through_sdk = outcome(openai.AsyncOpenAI(base_url=url, api_key="local", max_retries=0), "systemone")
        ours = outcome(HTTPClient(url), "systemone")
    assert through_sdk[0] == "answered", through_sdk
    assert ours == through_sdk
    assert [r.path for r in script.requests] == ["/systemone", "/moved/systemone"] * 2


# --- what the connection does besides a plain answer: TLS, proxies, encodings, redirects, uvloop ---------


async def _noul(sdk: HTTPClient) -> float:
    client = AsyncSystemOneClient(sdk, model="m", api="systemone", timeout=TIMEOUT)
    try:
        answered = await client.system_one(state="x", questions={"angry": QUESTIONS["angry"]})
    finally:
        await sdk.close()
    return answered.answers["angry"].noul  # type: ignore[union-attr]


def _compressed(coding: str, body: bytes) -> bytes:
    import gzip
    import zlib

    if coding == "gzip":
        return gzip.compress(body)
    if coding == "deflate":
        return zlib.compress(body)
    if coding == "raw-deflate":  # what some servers send as deflate: no zlib wrapper
        packer = zlib.compressobj(wbits=-15)
        return packer.compress(body) + packer.flush()
    if coding == "zstd":
        try:
            from compression import zstd  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            from backports import zstd  # type: ignore[import-not-found, no-redef, unused-ignore]
        return bytes(zstd.compress(body))
    if coding == "br":
        import brotli  # type: ignore[import-not-found, unused-ignore]

        return bytes(brotli.compress(body))
    raise AssertionError(f"no compressor for {coding}")


def test_every_coding_offered_in_accept_encoding_is_read_and_one_not_offered_is_named() -> None:
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(NOUL_BYTES), NOUL_BYTES)

    def answer(kind: str, accepted: str) -> bytes:
        if kind == "chunked":
            return _answer(chunked, "transfer-encoding: chunked")
        if kind == "until-close":
            return b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + NOUL_BYTES
        if kind in ("xz", "br") and kind not in accepted:  # br is offered where brotli is installed
            return _answer(b"\x0b\x02\x80", f"content-encoding: {kind}")
        coding = "deflate" if kind == "raw-deflate" else kind
        return _answer(_compressed(kind, NOUL_BYTES), f"content-encoding: {coding}")

    async def ask(kind: str) -> tuple[float | str, str]:
        server = _Raw(lambda *request: answer(kind, request[2].get("accept-encoding", "")))
        port = await server.start()
        try:
            return await _noul(HTTPClient(f"http://127.0.0.1:{port}/v1")), server.requests[0][2][
                "accept-encoding"
            ]
        except ProviderError as error:
            return str(error), server.requests[0][2]["accept-encoding"]
        finally:
            server.server.close()

    _, accepted = asyncio.run(ask("chunked"))
    offered = [c.strip() for c in accepted.split(",")]
    assert {"gzip", "deflate"} <= set(offered), accepted
    for kind in (*offered, "raw-deflate", "chunked", "until-close"):
        assert asyncio.run(ask(kind)) == (0.5, accepted), kind
    said, _ = asyncio.run(ask("xz"))  # aiohttp would hand the body on as it came
    assert (
        f"expected a body in {accepted} (the Accept-Encoding sent) or plain, got Content-Encoding 'xz'"
        in str(said)
    )
    if "br" not in offered:  # aiohttp refuses it in its own words
        said, _ = asyncio.run(ask("br"))
        assert "could not be reached" in str(said) and "(br)" in str(said), said


def test_a_header_line_that_never_ends_fails_at_its_bound_not_at_the_timeout() -> None:
    async def ask() -> str:
        endless = b"HTTP/1.1 200 OK\r\nx-endless: " + b"a" * 256 * 1024  # and the line stays open
        server = _Raw(lambda *request: endless)
        port = await server.start()
        try:
            await _noul(HTTPClient(f"http://127.0.0.1:{port}/v1"))
        except ProviderError as error:
            return f"{error.kind}: {error}"
        finally:
            server.server.close()
        return "answered"

    said = asyncio.run(ask())
    assert said.startswith("unreachable: "), said
    assert re.search(r"the server's answer could not be read: Got more than \d+ bytes", said), said


@pytest.mark.parametrize("key", ["sk-abc\n", "sk-abc\r\nX-Injected: yes", "sk-abc\x00def", "sk-abcé"])
def test_a_key_that_cannot_travel_as_a_header_is_refused_before_any_byte_and_never_quoted(key: str) -> None:
    async def ask() -> tuple[ConfigError, int]:
        server = _Raw(lambda *request: _answer(NOUL_BYTES))
        port = await server.start()
        try:
            with pytest.raises(ConfigError) as refused:
                await _noul(HTTPClient(f"http://127.0.0.1:{port}/v1", key))
        finally:
            server.server.close()
        return refused.value, server.connections

    refused, connections = asyncio.run(ask())
    assert connections == 0
    said = str(refused)
    assert "expected an api_key of printable ASCII characters" in said
    assert "sk-abc" not in said and "Injected" not in said and "def" not in said


def test_a_connect_timeout_says_that_no_connection_was_made_in_time() -> None:
    # A listener whose queue is full: the kernel drops further SYNs, so a connect hangs.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)

        async def ask() -> BaseException:
            sdk = HTTPClient(f"http://127.0.0.1:{port}/v1")
            try:
                await sdk.post("/systemone", body={}, options={"timeout": 0.3})
            except Exception as exc:
                return exc
            finally:
                await sdk.close()
            raise AssertionError("connected")

        try:
            failed = asyncio.run(ask())
        finally:
            for filler in fillers:
                filler.close()
    assert isinstance(failed, TimeoutError)
    url = f"http://127.0.0.1:{port}/v1/systemone"
    assert str(failed) == f"POST {url}: expected a connection to the server within 0.3 s, got none"


def test_a_netrc_entry_for_the_servers_host_neither_blocks_the_key_nor_is_sent_in_its_place(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    monkeypatch.setenv("NETRC", str(netrc))

    async def ask(key: str | None) -> tuple[float, str | None]:
        server = _Raw(lambda *request: _answer(NOUL_BYTES))
        port = await server.start()
        try:
            noul = await _noul(HTTPClient(f"http://127.0.0.1:{port}/v1", key))
        finally:
            server.server.close()
        return noul, server.requests[0][2].get("authorization")

    assert asyncio.run(ask("sk-test")) == (0.5, "Bearer sk-test")
    assert asyncio.run(ask(None)) == (0.5, None)


def test_a_redirect_to_another_server_does_not_carry_the_key() -> None:
    async def ask() -> list[dict[str, str]]:
        there = _Raw(lambda *request: _answer(NOUL_BYTES))
        port = await there.start()
        moved = f"location: http://localhost:{port}/v1/systemone"
        here = _Raw(lambda *request: _answer(b"", moved, status="307 Temporary Redirect"))
        here_port = await here.start()
        try:
            assert await _noul(HTTPClient(f"http://127.0.0.1:{here_port}/v1", "sk-secret")) == 0.5
        finally:
            here.server.close()
            there.server.close()
        return [h for _, _, h, _ in here.requests + there.requests]

    first, second = asyncio.run(ask())
    assert first["authorization"] == "Bearer sk-secret"
    assert "authorization" not in second


@pytest.fixture
def authority(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A certificate authority of the test's own, which the system's default context trusts."""
    import trustme

    ca = trustme.CA()
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return ca


def _tls_server(ca: Any) -> Any:
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    return context


def test_an_https_server_is_asked_over_tls_on_a_kept_connection_and_an_unknown_authority_is_refused(
    authority: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def ask(times: int) -> tuple[list[float | ProviderError], int]:
        server = _Raw(lambda *request: _answer(NOUL_BYTES), tls=_tls_server(authority))
        port = await server.start()
        try:
            return await _in_turn(f"https://localhost:{port}/v1", times), server.connections
        finally:
            server.server.close()

    assert asyncio.run(ask(3)) == ([0.5] * 3, 1)
    monkeypatch.delenv("SSL_CERT_FILE")
    (refused,), _ = asyncio.run(ask(1))
    assert isinstance(refused, ProviderError) and refused.kind == "unreachable"
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused)


class _Proxy:
    """A forward proxy: absolute-form requests relayed to their server, CONNECT as a tunnel."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str]]] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            method, target, headers, body = await _read_request(reader)
            self.seen.append((method, target, headers))
            if method == "CONNECT":
                host, port = target.rsplit(":", 1)
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
                return
            parts = target.split("/", 3)
            host, port = parts[2].rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            fields = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k != "proxy-authorization")
            up_writer.write(f"{method} /{parts[3]} HTTP/1.1\r\n{fields}\r\n".encode() + body)
            await asyncio.gather(_pipe(up_reader, writer))
        writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    writer.close()


def test_the_environments_proxy_carries_http_requests_and_tunnels_https_ones(
    authority: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def ask(scheme: str, credentials: str = "user:pa%20ss@") -> tuple[float, _Proxy, _Raw]:
        tls = _tls_server(authority) if scheme == "https" else None
        server = _Raw(lambda *request: _answer(NOUL_BYTES, "connection: close"), tls=tls)
        port = await server.start()
        proxy = _Proxy()
        proxy_port = await proxy.start()
        monkeypatch.setenv(f"{scheme.upper()}_PROXY", f"http://{credentials}127.0.0.1:{proxy_port}")
        try:
            return await _noul(HTTPClient(f"{scheme}://localhost:{port}/v1", "sk-test")), proxy, server
        finally:
            proxy.server.close()
            server.server.close()

    noul, proxy, server = asyncio.run(ask("http"))
    assert noul == 0.5
    ((method, target, headers),) = proxy.seen
    assert (method, target) == (
        "POST",
        f"http://localhost:{server.requests[0][2]['host'].split(':')[1]}/v1/systemone",
    )
    assert headers["proxy-authorization"] == "Basic dXNlcjpwYSBzcw=="  # user:pa ss
    assert server.requests[0][2]["authorization"] == "Bearer sk-test"

    noul, proxy, server = asyncio.run(ask("https"))
    assert noul == 0.5
    ((method, target, headers),) = proxy.seen
    assert method == "CONNECT" and target.startswith("localhost:")
    assert headers["proxy-authorization"] == "Basic dXNlcjpwYSBzcw=="
    assert server.requests[0][:2] == ("POST", "/v1/systemone")  # inside the tunnel, as to the server

    # A proxy without credentials of its own is not handed the key in their place.
    _, proxy, _ = asyncio.run(ask("http", credentials=""))
    assert "proxy-authorization" not in proxy.seen[0][2]
    _, proxy, server = asyncio.run(ask("https", credentials=""))
    ((method, _, headers),) = proxy.seen
    assert method == "CONNECT" and not {"authorization", "proxy-authorization"} & set(headers)
    assert server.requests[0][2]["authorization"] == "Bearer sk-test"

    monkeypatch.setenv("NO_PROXY", "localhost")
    noul, proxy, _ = asyncio.run(ask("http"))
    assert (noul, proxy.seen) == (0.5, [])


def test_a_proxy_that_refuses_the_tunnel_is_named_with_its_status(
    authority: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def ask() -> str:
        refusing = _Raw(lambda *request: _answer(b"", status="407 Proxy Authentication Required"))
        port = await refusing.start()
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
        try:
            await _noul(HTTPClient("https://localhost:1/v1", "sk-test"))
        except ProviderError as error:
            return f"{error.kind}: {error}"
        finally:
            refusing.server.close()
        return "answered"

    said = asyncio.run(ask())
    assert said.startswith("unreachable: ")
    assert "expected the proxy to open a tunnel, got 407 Proxy Authentication Required" in said


def test_the_connection_works_on_uvloop_as_ray_actors_run_it() -> None:
    import uvloop

    async def ask() -> tuple[list[float | ProviderError], int]:
        server = _Raw(lambda *request: _answer(NOUL_BYTES))
        port = await server.start()
        try:
            return await _in_turn(f"http://127.0.0.1:{port}/v1", 3), server.connections
        finally:
            server.server.close()

    assert uvloop.run(ask()) == ([0.5] * 3, 1)
