"""A JSON server on a free loopback port, one thread per request: the scaffolding of the test servers that
answer by a rule of their own (``moving``, ``dialects``) rather than by the fault server's rotation."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
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
        # stop() waits for the serving loop to look at its flag, every POLL_S.
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": POLL_S}, name=self._name, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        if self._thread is not None:
            self._thread.join(10)


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
