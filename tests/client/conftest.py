"""Client-test fixtures: a loopback HTTP server that answers with recorded or transcribed bodies, and
the cassette settings for the client-level recordings of the embedded llama.cpp."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

FIXTURES = Path(__file__).parents[1] / "fixtures" / "client"


@dataclass
class Exchange:
    method: str
    path: str
    body: Any


@dataclass
class Loopback:
    """A server on 127.0.0.1 that answers each path with the bodies queued for it, in order."""

    url: str  # ends in /v1
    requests: list[Exchange] = field(default_factory=list)
    replies: dict[str, deque[tuple[int, bytes, str]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    delay: float = 0.0  # seconds each answer waits, to let concurrent requests overlap
    in_flight: int = 0
    most_in_flight: int = 0

    def reply(
        self, path: str, status: int, body: str | bytes | dict[str, Any], content_type: str = ""
    ) -> None:
        if isinstance(body, dict):
            body = json.dumps(body)
        raw = body.encode() if isinstance(body, str) else body
        kind = content_type or ("application/json" if raw[:1] in (b"{", b"[", b'"') else "text/plain")
        self.replies.setdefault(path, deque()).append((status, raw, kind))

    def bodies(self, path: str | None = None) -> list[Any]:
        return [e.body for e in self.requests if path is None or e.path == path]


def _handler(loopback: Loopback) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
            path = self.path.removeprefix("/v1")
            with loopback.lock:
                loopback.in_flight += 1
                loopback.most_in_flight = max(loopback.most_in_flight, loopback.in_flight)
            time.sleep(loopback.delay)
            with loopback.lock:
                loopback.in_flight -= 1
                loopback.requests.append(Exchange("POST", path, body))
                queue = loopback.replies.get(path)
                status, payload, kind = (
                    queue.popleft() if queue else (599, f"nothing queued for {path}".encode(), "text/plain")
                )
            try:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up first (the timeout tests): nothing to answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def loopback() -> Iterator[Loopback]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Loopback(url="")))
    port = server.server_address[1]
    state = Loopback(url=f"http://127.0.0.1:{port}/v1")
    server.RequestHandlerClass = _handler(state)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def transcribed(name: str) -> dict[str, Any]:
    """A body transcribed from the reference document (provenance inside the file)."""
    cases: dict[str, dict[str, Any]] = json.loads((FIXTURES / "wire" / "transcribed.json").read_text())
    return cases[name]


def recorded(name: str) -> dict[str, Any]:
    """A body recorded from the embedded llama.cpp by tests/fixtures/client/record_wire.py."""
    record: dict[str, Any] = json.loads((FIXTURES / "wire" / f"llamacpp_{name}.json").read_text())
    return record


@pytest.fixture
def fixtures() -> Any:
    """Recorded and transcribed bodies: ``fixtures.recorded(name)``, ``fixtures.transcribed(name)``."""

    return SimpleNamespace(recorded=recorded, transcribed=transcribed)


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
