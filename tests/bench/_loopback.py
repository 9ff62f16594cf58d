"""An instant-answer HTTP server for the overhead benchmark, run in its own process.

Every POST is answered at once (or after ``--delay`` seconds) with one recorded body; the server keeps
connections alive and times its own work per request (request fully read -> response written), so the
report can show that it does not dominate what is measured. ``GET /__stats`` returns those timings and
resets them; ``GET /__last`` returns the last POST body as it arrived.

Run as ``python _loopback.py BODY_FILE [--delay S]``: it prints its port on the first line of stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from jevper.probe.cassettes import load_exchanges

_HEAD_END = b"\r\n\r\n"


def recorded_body(cassette: Path, index: int = 0) -> bytes:
    """The response body of one interaction in a vcrpy cassette, as compact JSON like a server sends."""
    text = load_exchanges(cassette)[index].text
    return json.dumps(json.loads(text), separators=(",", ":")).encode()


def _response(status: str, body: bytes, kind: bytes = b"application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: {kind.decode()}\r\ncontent-length: {len(body)}\r\n"
        "connection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


class _Instant(asyncio.Protocol):
    """One connection: parse HTTP/1.1 requests with content-length bodies, answer each at once."""

    def __init__(self, answer: bytes, stats: list[int], last: list[bytes], delay: float = 0.0) -> None:
        self.answer = answer
        self.stats = stats
        self.last = last
        self.delay = delay
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(_HEAD_END)
            if end < 0:
                return
            head = self.buffer[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            total = end + len(_HEAD_END) + length
            if len(self.buffer) < total:
                return
            started = time.perf_counter_ns()
            body = self.buffer[end + len(_HEAD_END) : total]
            self.buffer = self.buffer[total:]
            request_line = head.split(b" ", 2)
            self._answer(request_line, body)
            if request_line[0] == b"POST":
                self.stats.append(time.perf_counter_ns() - started)

    def _answer(self, request_line: list[bytes], body: bytes) -> None:
        assert self.transport is not None
        method, path = request_line[0], request_line[1]
        if method == b"POST":
            self.last[0] = body
            if self.delay:
                # Answers keep their order on the connection: each is written after the same wait.
                asyncio.get_running_loop().call_later(self.delay, self._write, self.answer)
            else:
                self.transport.write(self.answer)
        elif path == b"/__stats":
            timings = sorted(self.stats)
            report = {
                "requests": len(timings),
                "median_us": statistics.median(timings) / 1000 if timings else None,
                "p90_us": timings[int(0.9 * (len(timings) - 1))] / 1000 if timings else None,
            }
            self.stats.clear()
            self.transport.write(_response("200 OK", json.dumps(report).encode()))
        elif path == b"/__last":
            self.transport.write(_response("200 OK", self.last[0]))
        else:
            self.transport.write(_response("404 Not Found", b"{}"))

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


async def _serve(body: bytes, delay: float = 0.0) -> None:
    answer = _response("200 OK", body)
    stats: list[int] = []
    last = [b""]
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Instant(answer, stats, last, delay), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    async with server:
        await server.serve_forever()


@dataclass(frozen=True)
class InstantServer:
    """A running instant-answer server: its base URL (ends in /v1) and its process."""

    base_url: str
    process: subprocess.Popen[str]

    def stats(self) -> dict[str, float | None]:
        """The server's own time per request since the last call (median and p90, microseconds)."""
        reply = httpx.get(self.base_url.removesuffix("/v1") + "/__stats", timeout=5.0)
        data: dict[str, float | None] = reply.json()
        return data

    def last_body(self) -> dict[str, object]:
        reply = httpx.get(self.base_url.removesuffix("/v1") + "/__last", timeout=5.0)
        data: dict[str, object] = reply.json()
        return data


@contextlib.contextmanager
def instant_server(body: bytes, scratch: Path, delay: float = 0.0) -> Iterator[InstantServer]:
    """Start the server in its own process (so it runs beside, not inside, the measured client); with
    ``delay``, every POST is answered that many seconds after it arrived."""
    body_file = scratch / "instant-body.json"
    body_file.write_bytes(body)
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__)), str(body_file), "--delay", str(delay)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield InstantServer(f"http://127.0.0.1:{port}/v1", process)
    finally:
        process.terminate()
        process.wait(timeout=5)


if __name__ == "__main__":
    delay = float(sys.argv[3]) if sys.argv[2:3] == ["--delay"] else 0.0
    asyncio.run(_serve(Path(sys.argv[1]).read_bytes(), delay))
