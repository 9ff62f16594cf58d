"""A server that does not state its release stops the run before any probe is sent."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from jevper.probe import cli
from jevper.probe.presets import get_preset, states_release
from jevper.servers import SpawnedServer
from jevper.testing.loopback import served_on_a_thread


class _Llama(BaseHTTPRequestHandler):
    """llama.cpp's discovery routes as a build without git metadata answers them."""

    build_info = "b0-unknown"
    posts: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        body = {"build_info": self.build_info} if self.path == "/props" else {"data": [{"id": "smollm2"}]}
        payload = json.dumps(body).encode()
        status = 200 if self.path in ("/props", "/v1/models") else 404
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self) -> None:
        type(self).posts.append(self.path)
        self.send_response(500)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def llama() -> Iterator[tuple[str, type[_Llama]]]:
    handler = type("Handler", (_Llama,), {"posts": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    with served_on_a_thread(server):
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler


@pytest.mark.parametrize("build_info", ["b0-unknown", "b1-7e4c0a9"])
def test_a_llamacpp_that_states_no_release_stops_the_run_and_asks_for_its_release(
    llama: tuple[str, type[_Llama]], build_info: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, handler = llama
    handler.build_info = build_info
    status = cli.main(["--server", "llamacpp", "--base-url", url, "--out", str(tmp_path)])
    assert status == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "does not state its release" in err and "--release" in err and "nothing was run" in err
    assert handler.posts == []
    assert not (tmp_path / "fixtures").exists() or not any((tmp_path / "fixtures").iterdir())


def test_a_stated_release_is_read_from_the_build_before_its_commit(llama: tuple[str, type[_Llama]]) -> None:
    url, handler = llama
    handler.build_info = "b11549-3f2a1c0"
    assert get_preset("llamacpp").with_overrides(base_url=url).stated_release({}) == "b11549"


@pytest.mark.parametrize(
    ("value", "states"),
    [("b11549-3f2a1c0", True), ("0.32.0", True), ("b0-unknown", False), ("b1-7e4c0a9", False), ("", False)],
)
def test_only_a_version_naming_a_release_counts_as_stated(value: str, states: bool) -> None:
    assert states_release(value) is states


def test_the_old_spelling_server_version_still_names_the_release_with_a_warning(
    llama: tuple[str, type[_Llama]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = llama
    argv = ["--server", "llamacpp", "--base-url", url, "--server-version", "b77", "--only", "chat-logprobs"]
    cli.main([*argv, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert "--server-version is now spelled --release" in err
    assert (tmp_path / "fixtures" / "llamacpp-b77").is_dir()


class _Watched:
    """A real spawner whose start is only noted."""

    def __init__(self, spawner: Any, started: list[str]) -> None:
        self.kind, self.releases, self._spawner, self._started = (
            spawner.kind,
            spawner.releases,
            spawner,
            started,
        )

    def add_arguments(self, group: Any) -> None:
        self._spawner.add_arguments(group)

    def start(self, options: Any, api_key: str | None) -> Any:
        self._started.append(self.kind)
        raise cli.SpawnError("not started in this test")


def test_spawn_refuses_a_release_the_kind_cannot_start_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []
    real = cli.load_spawner
    monkeypatch.setattr(cli, "load_spawner", lambda module, kind: _Watched(real(module, kind), started))
    status = cli.main(["--server", "llamacpp", "--spawn", "--release", "b9999", "--out", str(tmp_path)])
    assert status == cli.EXIT_USAGE
    assert "--release: expected one of b11549, b11434, b10434 with --spawn --server llamacpp, got b9999" in (
        capsys.readouterr().err
    )
    assert started == []
    assert cli.main(["--server", "llamacpp", "--spawn", "--release", "b11434", "--out", str(tmp_path)]) == 3
    assert started == ["llamacpp"]


class _Started:
    """A spawner of a kind with no choice of release, whose server states another than was asked."""

    kind = "vllm"
    releases: tuple[str, ...] = ()

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url, self.log = url, tmp_path / "log"

    def add_arguments(self, group: object) -> None:
        pass

    @contextlib.contextmanager
    def start(self, options: object, api_key: str | None) -> Iterator[SpawnedServer]:
        yield SpawnedServer(self.url, "smollm2", "vllm", "0.32.0", "smollm2", (), self.log)


def test_spawn_stops_when_the_started_server_states_another_release_than_asked(
    llama: tuple[str, type[_Llama]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, handler = llama
    monkeypatch.setattr(cli, "load_spawner", lambda module, kind: _Started(url, tmp_path))
    status = cli.main(["--server", "vllm", "--spawn", "--release", "0.33.0", "--out", str(tmp_path)])
    assert status == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--release: expected the started vllm to be 0.33.0, it states 0.32.0; nothing was run" in err
    assert handler.posts == []


class _Slots(_Started):
    """The llama.cpp spawner's server of two slots: the release asked, named for its slots."""

    kind = "llamacpp"
    releases: tuple[str, ...] = ("b11549",)

    @contextlib.contextmanager
    def start(self, options: object, api_key: str | None) -> Iterator[SpawnedServer]:
        yield SpawnedServer(self.url, "smollm2", "llamacpp", "b11549-2slots", "smollm2", (), self.log)


def test_spawn_takes_the_release_asked_named_for_a_variant_of_the_recipe(
    llama: tuple[str, type[_Llama]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # --release b11549 --llamacpp-slots 2 starts b11549, which states b11549-2slots: a recording of its own.
    url, _ = llama
    monkeypatch.setattr(cli, "load_spawner", lambda module, kind: _Slots(url, tmp_path))
    argv = ["--server", "llamacpp", "--spawn", "--release", "b11549", "--only", "chat-bad-path"]
    status = cli.main([*argv, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert "--release: expected" not in err
    assert status != cli.EXIT_USAGE
    assert (tmp_path / "fixtures" / "llamacpp-b11549-2slots" / "results.json").is_file()
