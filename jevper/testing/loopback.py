"""A JSON server on a free loopback port, one thread per request: the scaffolding of the test servers that
answer by a rule of their own (``moving``, ``dialects``) rather than by the fault server's rotation."""

from __future__ import annotations

import contextlib
import json
import socketserver
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from jevper.testing.bodies import encode

#: (method, path, parsed JSON body or None when it is not JSON, its size in bytes) -> (status, body).
Answerer = Callable[[str, str, Any, int], tuple[int, Any]]
_answering = threading.local()


def request_headers() -> Mapping[str, str]:
    """The headers of the request this thread is answering (each request has a thread of its own), for an
    answerer that reads one; names lower-case."""
    headers: Mapping[str, str] = getattr(_answering, "headers", {})
    return headers


#: How often a serving loop looks whether it was asked to stop (the standard library's default, 0.5 s,
#: made every stop wait a quarter of a second on average).
POLL_S = 0.02


def start_serving(server: socketserver.BaseServer, name: str) -> threading.Thread:
    """``server`` served on a daemon thread, which looks every POLL_S whether it was asked to stop."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_S}, name=name, daemon=True
    )
    thread.start()
    return thread


def stop_serving(server: socketserver.BaseServer, thread: threading.Thread) -> None:
    """Ends what ``start_serving`` started: the loop stopped, the socket closed, the thread gone."""
    server.shutdown()
    server.server_close()
    thread.join(10)


@contextlib.contextmanager
def served_on_a_thread(server: socketserver.BaseServer, name: str = "loopback") -> Iterator[None]:
    """``server`` served on its own thread for the block (a test's server of its own handler)."""
    thread = start_serving(server, name)
    try:
        yield
    finally:
        stop_serving(server, thread)


class LoopbackServer:
    """Serves `answerer` on 127.0.0.1; `start()` runs it on a daemon thread, `stop()` ends it."""

    def __init__(self, answerer: Answerer, name: str) -> None:
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(answerer))
        self._http.daemon_threads = True
        self._name = name
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> None:
        self._thread = start_serving(self._http, self._name)

    def stop(self) -> None:
        if self._thread is None:
            self._http.server_close()
            return
        stop_serving(self._http, self._thread)


def _handler(answerer: Answerer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            _answering.headers = {k.lower(): v for k, v in self.headers.items()}
            self._send(*answerer("GET", self.path, None, 0))

        def do_POST(self) -> None:
            _answering.headers = {k.lower(): v for k, v in self.headers.items()}
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                parsed = json.loads(raw or b"null")
            except ValueError:
                parsed = None
            self._send(*answerer("POST", self.path, parsed, len(raw)))

        def _send(self, status: int, body: Any) -> None:
            data = encode(body)
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # the tests' output stays quiet
            return

    return Handler
