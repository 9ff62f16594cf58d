"""The scripted mode of the fault server: replies a test queued per path, and the requests answered.

Client tests drive the real SDKs against it; the fault server owns the socket, and a fault named in
the path or header still wins over anything queued.
"""

from __future__ import annotations

import asyncio
import http
import json
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jevper.testing.faults import Reply


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the /fault/<spec> prefix and without the query
    headers: Mapping[str, str]
    body: bytes
    received_at: float = field(default_factory=time.monotonic)  # when the server had read it

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


@dataclass(frozen=True)
class Queued:
    """One reply a test queued: what a scripted server sends back, byte for byte."""

    status: int
    body: bytes
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class Script:
    """The replies a scripted server serves, queued per path (relative to /v1), and the requests it took.

    With nothing queued for a path the answer is a 599, so a test that queues too few replies fails on
    that status instead of reading an answer nobody wrote.
    """

    replies: dict[str, deque[Queued]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)  # in the order they were answered
    delay: float = 0.0  # seconds each answer waits, to let concurrent requests overlap
    in_flight: int = 0
    most_in_flight: int = 0
    #: what GET /models answers with; None: the fault server's own list (one model, no architecture)
    models: Queued | None = None
    listed: list[Request] = field(default_factory=list)  # the GET /models requests, in order
    # The test thread queues and reads while the server's loop thread answers.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(
        self,
        path: str,
        status: int,
        body: str | bytes | dict[str, Any],
        content_type: str = "",
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Queue one reply for ``path``; the content type defaults to JSON when the body looks like it."""
        if isinstance(body, dict):
            body = json.dumps(body)
        raw = body.encode() if isinstance(body, str) else body
        kind = content_type or ("application/json" if raw[:1] in (b"{", b"[", b'"') else "text/plain")
        with self.lock:
            self.replies.setdefault(path, deque()).append(Queued(status, raw, kind, tuple(headers)))

    def model_list(
        self, status: int, body: str | bytes | dict[str, Any], headers: Sequence[tuple[str, str]] = ()
    ) -> None:
        """What every GET /models answers with from now on (a POST reply queued for /models never is)."""
        raw = (
            json.dumps(body).encode()
            if isinstance(body, dict)
            else body.encode()
            if isinstance(body, str)
            else body
        )
        kind = "application/json" if raw[:1] in (b"{", b"[", b'"') else "text/plain"
        with self.lock:
            self.models = Queued(status, raw, kind, tuple(headers))

    async def list_models(self, reply: Reply, request: Request) -> bool:
        """Keep the GET /models request; answer it when a model list was set, and say whether it was."""
        with self.lock:
            self.listed.append(replace(request, path=request.path.removeprefix("/v1")))
            queued = self.models
        if queued is None:
            return False
        reply.keep_alive = False
        extra = (*queued.headers, ("connection", "close"))
        await reply.send(queued.status, _reason(queued.status), queued.body, queued.content_type, extra)
        return True

    def bodies(self, path: str | None = None) -> list[Any]:
        """The bodies of the requests answered (on ``path`` only, if given): JSON parsed, else text."""
        with self.lock:
            taken = [r.body for r in self.requests if path is None or r.path == path]
        return [_parsed(body) for body in taken]

    async def serve(self, reply: Reply, request: Request) -> None:
        path = request.path.removeprefix("/v1")
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            with self.lock:
                self.in_flight -= 1
        with self.lock:
            self.requests.append(replace(request, path=path))
            queue = self.replies.get(path)
            queued = (
                queue.popleft() if queue else Queued(599, f"nothing queued for {path}".encode(), "text/plain")
            )
        # One answer per connection: an async SDK client reused across asyncio.run() calls keeps a pooled
        # connection bound to a closed loop, and fails on it, if the server lets it keep one.
        reply.keep_alive = False
        extra = (*queued.headers, ("connection", "close"))
        await reply.send(queued.status, _reason(queued.status), queued.body, queued.content_type, extra)


def _parsed(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return body.decode(errors="replace")


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Nothing Queued" if status == 599 else "Unknown Status"
