"""A loopback HTTP server that answers like Chat Completions, Responses, Messages, System One or OpenAI's
Decisions API, with one fault.

The fault is chosen per request, by a path prefix or a header::

    http://127.0.0.1:PORT/fault/hang-no-bytes/v1        every request under it hangs
    http://127.0.0.1:PORT/fault/ok,ok,crash/v1          a rotation: two answers, then the server dies
    x-jevper-fault: 429-retry-after                     on any request (wins over the path)

Faults apply to POSTs on the surface routes (System One's and POST /v1/decisions too); ``GET /v1/models``
always answers, so a tool's reachability check passes and the fault lands on the request that matters.
The server writes raw bytes on a socket, so it can stop mid-header, reset a connection or send a body
its headers lie about.

In relay mode (``FaultServer(upstream="http://127.0.0.1:8080")``) every request with no fault named
(and every GET, and every path that is not a surface route) is passed to that real server and its
answer handed back byte for byte, so a run through it differs from a run against the server only where
a fault is named: ``/fault/ok,html-404,ok/v1`` changes the second answer alone.

In scripted mode (``FaultServer(script=Script())``, see ``jevper.testing.script``) a POST with no
fault named answers with the next reply a test queued on the ``Script`` for its path, and the script
keeps the requests it answered.

Run ``python -m jevper.testing.faults --port N`` for a demo; ``--list`` prints the faults.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import struct
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from jevper._wire import PROMPT_RECORDS, RECORDS, Surface, decisions, prompt_record
from jevper.testing.bodies import BODY_FAULTS, Answer, encode
from jevper.testing.decisions import DECISIONS_BODY_FAULTS, DecisionsAnswer
from jevper.testing.script import Request, Script
from jevper.testing.systemone import SYSTEMONE_BODY_FAULTS, SystemOneAnswer

#: What a fault serves: a prompt surface's answer, or the answers to a System One or Decisions request.
Answers = Answer | SystemOneAnswer | DecisionsAnswer
#: A route the server answers: a client surface's, or POST /v1/decisions (which no client record holds).
Served = Surface | decisions.DecisionsRoute

#: How long a hanging fault holds a connection before giving up on the client (it should leave first).
HANG_S = 120.0
#: The slow drip: one chunk every DRIP_INTERVAL_S, the whole body spread over DRIP_TOTAL_S.
DRIP_INTERVAL_S, DRIP_TOTAL_S = 0.25, 6.0
HUGE_BYTES = 50 * 1024 * 1024
RETRY_AFTER_S = 1
FAULT_HEADER = "x-jevper-fault"
_MAX_REQUEST_BYTES = 16 * 1024 * 1024
_ROUTES: tuple[tuple[str, Served], ...] = (
    *((f"/{r.route}", r.name) for r in RECORDS.values()),
    (f"/{decisions.ROUTE}", decisions.SURFACE),
)
_HTML_500 = (
    b"<!DOCTYPE html><html><head><title>500 Internal Server Error</title></head><body>"
    b"<h1>Internal Server Error</h1><p>The server encountered an unexpected condition.</p></body></html>"
)
_HTML_404 = (
    b"<!DOCTYPE html><html><head><title>404 Not Found</title></head><body><h1>Not Found</h1>"
    b"<p>The requested URL was not found on this server.</p><hr><address>nginx</address></body></html>"
)


@dataclass
class ServedFault:
    """What the server did: which fault it served on which route (for tests and the demo log)."""

    fault: str
    method: str
    path: str
    surface: Served | None


class Reply:
    """The writing side of one request: raw bytes, with helpers for a well-formed response."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: FaultServer
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.server = server
        self.keep_alive = True

    async def head(self, status: int, reason: str, headers: Sequence[tuple[str, str]]) -> None:
        lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers), "", ""]
        self.writer.write("\r\n".join(lines).encode("latin-1"))
        await self.writer.drain()

    async def send(
        self, status: int, reason: str, body: bytes, content_type: str, extra: Sequence[tuple[str, str]] = ()
    ) -> None:
        headers = [("content-type", content_type), ("content-length", str(len(body))), *extra]
        await self.head(status, reason, headers)
        self.writer.write(body)
        await self.writer.drain()

    async def json(self, status: int, reason: str, body: Any, extra: Sequence[tuple[str, str]] = ()) -> None:
        await self.send(status, reason, encode(body), "application/json", extra)

    async def hang(self) -> None:
        """Hold the connection, sending nothing, until the client leaves or the server stops."""
        self.keep_alive = False
        waits = [asyncio.ensure_future(self.server.closing.wait()), asyncio.ensure_future(self.reader.read())]
        with contextlib.suppress(ConnectionError):
            await asyncio.wait(waits, timeout=HANG_S, return_when=asyncio.FIRST_COMPLETED)
        for waiting in waits:
            waiting.cancel()


@dataclass(frozen=True)
class Fault:
    name: str
    says: str  # what the server does, in one line
    serve: Callable[[Reply, Served, Request, Answers], Awaitable[None]]


FAULTS: dict[str, Fault] = {}


def fault(name: str, says: str) -> Callable[[Callable[..., Awaitable[None]]], Callable[..., Awaitable[None]]]:
    def register(serve: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        FAULTS[name] = Fault(name, says, serve)
        return serve

    return register


@fault("ok", "a healthy answer (label A with logprobs, or a JSON answer to the schema sent)")
async def _ok(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    await reply.json(200, "OK", answer.body())


@fault("hang-no-bytes", "reads the request and never sends a byte")
async def _hang(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    await reply.hang()


@fault("hang-after-headers", "sends 200 and the headers (content-length set), then no body")
async def _hang_after_headers(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    body = encode(answer.body())
    await reply.head(200, "OK", [("content-type", "application/json"), ("content-length", str(len(body)))])
    await reply.hang()


@fault("connection-reset", "reads the request and resets the connection (RST, no response)")
async def _reset(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    sock = reply.writer.get_extra_info("socket")
    if sock is not None:
        # Linger 0 turns close() into a reset instead of an orderly FIN.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    reply.keep_alive = False
    reply.writer.transport.abort()


@fault("slow-drip", f"a valid 200 body dripped in chunks every {DRIP_INTERVAL_S} s over {DRIP_TOTAL_S} s")
async def _drip(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    await _dripped(reply, 200, "OK", encode(answer.body()))


@fault(
    "slow-drip-error", f"a 500 error body dripped in chunks every {DRIP_INTERVAL_S} s over {DRIP_TOTAL_S} s"
)
async def _drip_error(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    # An SDK reads an error body itself, before handing any response back: the whole exchange must still
    # end at the caller's timeout.
    body = encode(
        {"error": {"message": "the model failed: " + "x" * 200, "type": "server_error", "code": 500}}
    )
    await _dripped(reply, 500, "Internal Server Error", body)


async def _dripped(reply: Reply, status: int, reason: str, body: bytes) -> None:
    """Send a JSON body in chunks every DRIP_INTERVAL_S, spread over DRIP_TOTAL_S."""
    await reply.head(
        status, reason, [("content-type", "application/json"), ("content-length", str(len(body)))]
    )
    steps = max(1, int(DRIP_TOTAL_S / DRIP_INTERVAL_S))
    size = max(1, -(-len(body) // steps))
    for start in range(0, len(body), size):
        reply.writer.write(body[start : start + size])
        await reply.writer.drain()
        await asyncio.sleep(DRIP_INTERVAL_S)


@fault("html-500", "500 with an HTML error page")
async def _html_500(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    await reply.send(500, "Internal Server Error", _HTML_500, "text/html; charset=utf-8")


def _retry_after(status: int, reason: str, seconds: int | None) -> Callable[..., Awaitable[None]]:
    """The fault's answer asks for a wait of `seconds` (None: the server's ``retry_after``)."""

    async def serve(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
        wait = reply.server.retry_after if seconds is None else seconds
        body = {
            "error": {"message": f"{reason}: try again in {wait} s", "type": "overloaded", "code": status}
        }
        await reply.json(status, reason, body, [("retry-after", str(wait))])

    return serve


fault("502-retry-after", f"502 with Retry-After: {RETRY_AFTER_S} (the server's retry_after)")(
    _retry_after(502, "Bad Gateway", None)
)
fault("503-retry-after", f"503 with Retry-After: {RETRY_AFTER_S} (the server's retry_after)")(
    _retry_after(503, "Service Unavailable", None)
)
fault("429-retry-after", f"429 with Retry-After: {RETRY_AFTER_S} (the server's retry_after)")(
    _retry_after(429, "Too Many Requests", None)
)
fault("429-retry-after-hour", "429 with Retry-After: 3600 (a client must cap the wait)")(
    _retry_after(429, "Too Many Requests", 3600)
)


@fault("truncated-json", "200, application/json, the body cut in half (content-length matches the half)")
async def _truncated(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    body = encode(answer.body())
    await reply.send(200, "OK", body[: len(body) // 2], "application/json")


@fault("non-json-body", "200, application/json, a body of plain words")
async def _non_json(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    await reply.send(200, "OK", b"Model is loading, please wait.", "application/json")


@fault("wrong-content-type", "200 with a valid JSON body labelled text/html")
async def _wrong_type(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    await reply.send(200, "OK", encode(answer.body()), "text/html; charset=utf-8")


@fault("huge-body", f"200 with a valid answer padded to {HUGE_BYTES // 2**20} MB")
async def _huge(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    head = encode(answer.body())[:-1] + b', "padding": "'
    tail = b'"}'
    pad = HUGE_BYTES - len(head) - len(tail)
    headers = [("content-type", "application/json"), ("content-length", str(HUGE_BYTES))]
    await reply.head(200, "OK", headers)
    reply.writer.write(head)
    chunk = b"x" * (1 << 20)
    while pad > 0:
        reply.writer.write(chunk[: min(pad, len(chunk))])
        pad -= len(chunk)
        await reply.writer.drain()
    reply.writer.write(tail)
    await reply.writer.drain()


@fault("html-404", "404 with an HTML page on the surface's own route")
async def _html_404(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    await reply.send(404, "Not Found", _HTML_404, "text/html")


@fault("crash", "the server stops listening and drops every connection (a crash mid-run)")
async def _crash(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
    reply.keep_alive = False
    reply.writer.transport.abort()
    reply.server.crash()


def _body_fault(name: str) -> Callable[..., Awaitable[None]]:
    async def serve(reply: Reply, surface: Served, request: Request, answer: Answers) -> None:
        if isinstance(answer, SystemOneAnswer):
            await reply.json(200, "OK", SYSTEMONE_BODY_FAULTS[name](answer))
        elif isinstance(answer, DecisionsAnswer):
            await reply.json(200, "OK", DECISIONS_BODY_FAULTS[name](answer))
        else:
            await reply.json(200, "OK", BODY_FAULTS[name](answer))

    return serve


_BODY_SAYS = {
    "invalid-utf8-content": "200 whose answer text holds bytes that are not UTF-8",
    "invalid-utf8-reasoning": "200 whose reasoning trace holds bytes that are not UTF-8",
    "nan-logprob": "200 with a NaN logprob (Messages: NaN in the JSON answer)",
    "infinity-logprob": "200 with an Infinity logprob (Messages: Infinity in the JSON answer)",
    "positive-logprob": "200 with a logprob of 0.7 (Messages: a negative probability in the answer)",
    "short-logprobs": "200, a trace, and logprobs that stop before the answer (Messages: options missing)",
    "duplicate-alternatives": "200 with the same alternative listed twice (Messages: a key twice)",
    "empty-choices": "200 with choices [] (Responses: output [], Messages: content [])",
    "null-choices": "200 with choices null (Responses: output null, Messages: content null)",
    "embedded-error": "200 carrying {'error': {...}} and nothing else",
}
for _name, _says in _BODY_SAYS.items():
    fault(_name, _says)(_body_fault(_name))


def route(path: str) -> Served | None:
    for suffix, surface in _ROUTES:
        if path.rstrip("/").endswith(suffix):
            return surface
    return None


class FaultServer:
    """The server; ``start()`` runs it on a background thread, ``serve()`` in the calling one."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        model: str = "fault-model",
        script: Script | None = None,
        upstream: str | None = None,
        delay: float = 0.0,
        retry_after: int = RETRY_AFTER_S,
    ) -> None:
        self.host, self.port, self.model, self.script = host, port, model, script
        self.delay = delay  # seconds every surface answer waits first: a server that takes time
        # The Retry-After the 502, 503 and 429 faults send: 0 for a test of what follows the answer, not
        # of the wait (the waits have tests of their own).
        self.retry_after = retry_after
        self.upstream = upstream.rstrip("/") if upstream else None  # the real server's root, in relay mode
        self.log: list[ServedFault] = []
        self.closing = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._rotation: dict[str, int] = {}
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self.crashed = False

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def base_url(self, *faults: str) -> str:
        """The base URL (ending in /v1) under which every request gets ``faults``, in rotation."""
        unknown = [f for f in faults if f not in FAULTS]
        if unknown:
            raise ValueError(f"expected fault names among {sorted(FAULTS)}, got {unknown}")
        return f"{self.url}/fault/{','.join(faults)}/v1" if faults else f"{self.url}/v1"

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.closing = asyncio.Event()
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self.closing.wait()
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        # Let hanging handlers see `closing` and finish before the loop goes away: each drops its
        # connection as it ends. Waiting 50 ms whether or not one was left made every stop cost that.
        ends = self._loop.time() + 0.05
        while self._writers and self._loop.time() < ends:
            await asyncio.sleep(0.001)

    def serve(self) -> None:
        asyncio.run(self.run())

    def start(self) -> FaultServer:
        self._thread = threading.Thread(target=self.serve, name="fault-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fault server did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self.closing.set)
        if self._thread is not None:
            self._thread.join(10)

    def crash(self) -> None:
        """Stop accepting connections at once; called from the loop thread by the crash fault."""
        self.crashed = True
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self.closing.set()

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _pick(self, spec: str) -> str:
        names = spec.split(",")
        turn = self._rotation.get(spec, 0)
        self._rotation[spec] = turn + 1
        return names[turn % len(names)]

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while not self.closing.is_set():
                parsed = await _read_request(reader)
                if parsed is None:
                    break
                request, spec = parsed
                reply = Reply(reader, writer, self)
                await self._answer(reply, request, spec)
                if not reply.keep_alive or request.headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ValueError, asyncio.CancelledError):
            # CancelledError: the server is stopping under a handler that is still dripping or hanging.
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _relay(self, reply: Reply, request: Request) -> None:
        """Pass the request to the upstream server and its answer back (relay mode).

        Raw bytes on a socket of its own, not an HTTP client: a test recording through vcrpy in this
        process would record the relay's own request into its cassette too.
        """
        assert self.upstream is not None
        target = urlsplit(self.upstream)
        host, port = target.hostname or "127.0.0.1", target.port or 80
        skip = {"host", "content-length", "connection", "accept-encoding", "transfer-encoding", FAULT_HEADER}
        lines = [f"{request.method} {target.path.rstrip('/')}{request.path} HTTP/1.1", f"host: {host}:{port}"]
        lines += [f"{k}: {v}" for k, v in request.headers.items() if k not in skip]
        lines += [f"content-length: {len(request.body)}", "connection: close", "", ""]
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
            upstream_writer.write("\r\n".join(lines).encode("latin-1") + request.body)
            await upstream_writer.drain()
            raw = await asyncio.wait_for(upstream_reader.read(), HANG_S)
            upstream_writer.close()
            status, reason, kind, body = _parse_response(raw)
        except (OSError, ValueError, TimeoutError) as exc:
            await reply.json(502, "Bad Gateway", {"error": {"message": f"upstream: {exc!r}"}})
            return
        self.log.append(ServedFault("relayed", request.method, request.path, route(request.path)))
        await reply.send(status, reason, body, kind)

    async def _answer(self, reply: Reply, request: Request, spec: str | None) -> None:
        surface = route(request.path)
        if self.upstream is not None:
            named = request.headers.get(FAULT_HEADER) or (self._pick(spec) if spec and surface else None)
            if surface is None or request.method != "POST" or named in (None, "ok"):
                await self._relay(reply, request)
                return
            request = Request(
                request.method, request.path, {**request.headers, FAULT_HEADER: named}, request.body
            )
        if request.method == "GET" and request.path.rstrip("/").endswith("/models"):
            self.log.append(ServedFault("ok", request.method, request.path, None))
            if self.script is not None and await self.script.list_models(reply, request):
                return
            models = {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "jevper"}]}
            await reply.json(200, "OK", models)
            return
        if (
            self.script is not None
            and request.method == "POST"
            and not (request.headers.get(FAULT_HEADER) or spec)
        ):
            await self.script.serve(reply, request)
            return
        if surface is None or request.method != "POST":
            self.log.append(ServedFault("ok", request.method, request.path, None))
            await reply.json(
                404, "Not Found", {"error": {"message": f"no route {request.path}", "code": 404}}
            )
            return
        name = request.headers.get(FAULT_HEADER) or (self._pick(spec) if spec else "ok")
        chosen = FAULTS.get(name)
        if chosen is None:
            await reply.json(
                400, "Bad Request", {"error": {"message": f"unknown fault {name!r}; see --list"}}
            )
            return
        self.log.append(ServedFault(name, request.method, request.path, surface))
        parsed = request.json()
        model = parsed.get("model") if isinstance(parsed, dict) else None
        named = model if isinstance(model, str) else self.model
        if surface in PROMPT_RECORDS:
            answer: Answers = Answer(prompt_record(surface).name, parsed, named)
        elif surface == decisions.SURFACE:
            answer = DecisionsAnswer(parsed, named)
        else:
            answer = SystemOneAnswer(parsed, named)
        if self.delay:
            await asyncio.sleep(self.delay)
        try:
            await chosen.serve(reply, surface, request, answer)
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as exc:
            # A bug here must not pass for an injected fault: say so on stderr and answer 599.
            print(f"fault server: {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            await reply.json(599, "Fault Server Bug", {"error": {"message": f"{type(exc).__name__}: {exc}"}})


def _parse_response(raw: bytes) -> tuple[int, str, str, bytes]:
    """(status, reason, content type, body) of a whole HTTP/1.1 response read to the connection's end."""
    head, separator, rest = raw.partition(b"\r\n\r\n")
    if not separator:
        raise ValueError(f"expected an HTTP response, got {raw[:80]!r}")
    lines = head.decode("latin-1").split("\r\n")
    _, status, *reason = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            body, rest = body + rest[:size], rest[size + 2 :]
    elif "content-length" in headers:
        body = rest[: int(headers["content-length"])]
    else:
        body = rest
    kind = headers.get("content-type", "application/octet-stream")
    return int(status), reason[0] if reason else "", kind, body


async def _read_request(reader: asyncio.StreamReader) -> tuple[Request, str | None] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    if length > _MAX_REQUEST_BYTES:
        raise ValueError("request body too large")
    body = await reader.readexactly(length) if length else b""
    path = target.split("?", 1)[0]
    spec: str | None = None
    if path.startswith("/fault/"):
        _, _, spec_and_rest = path.partition("/fault/")
        spec, _, rest = spec_and_rest.partition("/")
        path = "/" + rest
    return Request(method, path, headers, body), spec


@contextlib.contextmanager
def running(
    model: str = "fault-model",
    *,
    script: Script | None = None,
    upstream: str | None = None,
    retry_after: int = RETRY_AFTER_S,
) -> Iterator[FaultServer]:
    """A fault server on a free loopback port for the duration of the block (scripted, given a script;
    relaying to a real server, given its root URL as `upstream`)."""
    server = FaultServer(model=model, script=script, upstream=upstream, retry_after=retry_after).start()
    try:
        yield server
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jevper.testing.faults",
        description="Serve the surfaces (System One too) on loopback with one injected fault per request.",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--list", action="store_true", help="print the faults and exit")
    parser.add_argument("--upstream", help="relay mode: requests with no fault named go to this server root")
    parser.add_argument(
        "--delay", type=float, default=0.0, help="seconds each answer waits first (default 0: at once)"
    )
    args = parser.parse_args(argv)
    if args.list:
        for item in FAULTS.values():
            print(f"{item.name:<24} {item.says}")
        return 0
    server = FaultServer(port=args.port, upstream=args.upstream, delay=args.delay)

    async def announce_and_run() -> None:
        task = asyncio.create_task(server.run())
        while not server._ready.is_set():
            await asyncio.sleep(0.01)
        print(f"fault server on {server.url}; base URLs look like {server.url}/fault/<name>/v1", flush=True)
        print(f"faults: {', '.join(FAULTS)}", flush=True)
        await task

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(announce_and_run())
    print("fault server stopped" + (" (crash fault)" if server.crashed else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
