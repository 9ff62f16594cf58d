"""Recording a release the destination already holds: a run of every probe is refused before anything is
sent unless --replace says to record it again in the old one's place."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from jevper.probe import cli
from jevper.testing.loopback import served_on_a_thread

RECORDED = Path(__file__).parents[1] / "fixtures" / "providers" / "llamacpp-b11549"


class _Refusing(BaseHTTPRequestHandler):
    """Lists one model; answers every probe with a 500, and counts them."""

    posts: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        payload = json.dumps({"data": [{"id": "smollm2"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self) -> None:
        type(self).posts.append(self.path)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(500)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Refusing]]]:
    handler = type("Handler", (_Refusing,), {"posts": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    with served_on_a_thread(httpd):
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", handler


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """An --out folder that already holds a recording of llama.cpp b11549."""
    shutil.copytree(RECORDED, tmp_path / "fixtures" / RECORDED.name)
    return tmp_path


def record(url: str, out: Path, *more: str) -> int:
    argv = ["--server", "llamacpp", "--base-url", f"{url}=smollm2", "--release", "b11549", "--out", str(out)]
    return cli.main([*argv, *more])


def test_recording_a_release_again_is_refused_naming_replace_and_sends_nothing(
    server: tuple[str, type[_Refusing]], out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, handler = server
    results = out / "fixtures" / RECORDED.name / "results.json"
    before = results.read_bytes()
    assert record(url, out) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "llamacpp-b11549 is already recorded" in err
    assert "--replace" in err and "--out" in err and "nothing was run" in err
    assert handler.posts == []
    assert results.read_bytes() == before


def test_replace_records_it_again_in_the_old_recordings_place(
    server: tuple[str, type[_Refusing]], out: Path
) -> None:
    url, handler = server
    results = out / "fixtures" / RECORDED.name / "results.json"
    record(url, out, "--replace", "--timeout", "10")
    assert handler.posts, "expected the probes sent"
    recording = json.loads(results.read_text(encoding="utf-8"))
    assert "--replace" in recording["command"] and not recording.get("updates"), recording["command"]
    # Every probe this server answered with a POST is its 500 now.
    statuses = {probe["status"] for probe in recording["probes"] if probe["status"] != 200}
    assert statuses == {500}, f"expected the new recording's 500s, got {statuses}"
