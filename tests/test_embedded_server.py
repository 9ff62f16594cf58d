from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from jevper.probe.spawn import KEEP_LOGS, SpawnedServer, embedded_binary, embedded_model_path, new_log


def test_the_embedded_binary_reports_its_release_from_the_wheel_version() -> None:
    binary = embedded_binary()
    assert binary.version.startswith("b")
    assert binary.version[1:].isdigit()
    assert binary.path.is_file()


def test_the_embedded_model_is_an_f16_gguf_converted_once() -> None:
    first = embedded_model_path()
    assert first.read_bytes()[:4] == b"GGUF"
    assert embedded_model_path() == first


@pytest.mark.live
def test_the_embedded_server_answers_chat_completions_with_logprobs(llamacpp: SpawnedServer) -> None:
    reply = httpx.post(
        f"{llamacpp.base_url}/chat/completions",
        json={
            "model": llamacpp.model,
            "messages": [{"role": "user", "content": "Say yes."}],
            "max_tokens": 2,
            "logprobs": True,
            "top_logprobs": 3,
        },
        timeout=30,
    )
    assert reply.status_code == 200
    entry = reply.json()["choices"][0]["logprobs"]["content"][0]
    assert len(entry["top_logprobs"]) == 3
    assert entry["logprob"] <= 0.0


def test_a_new_server_log_leaves_only_the_newest_earlier_logs_of_its_kind(tmp_path: Path) -> None:
    for i in range(8):
        log = tmp_path / f"llama-server-{1000 + i}.log"
        log.write_text(str(i))
        os.utime(log, (1_000_000 + i, 1_000_000 + i))
    other = tmp_path / "vllm-serve-7.log"
    other.write_text("another kind")
    path = new_log(tmp_path, "llama-server", 2000)
    assert path == tmp_path / "llama-server-2000.log" and not path.exists()
    kept = sorted(p.name for p in tmp_path.glob("llama-server-*.log"))
    # With the new one, KEEP_LOGS logs of this kind remain: the newest earlier ones.
    assert kept == [f"llama-server-{1000 + i}.log" for i in range(8 - (KEEP_LOGS - 1), 8)]
    assert other.exists()


@pytest.mark.live
def test_a_spawned_server_dies_with_a_parent_killed_without_unwinding(tmp_path: Path) -> None:
    # SIGTERM ends a Python process without running its finally blocks, so only the kernel's
    # parent-death signal can stop the server it started.
    script = (
        "import sys, time\n"
        "from jevper.probe.spawn import spawn_llamacpp\n"
        "with spawn_llamacpp() as server:\n"
        "    print(server.extra['pid'], flush=True)\n"
        "    time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = 0
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        os.kill(pid, 0)  # the server runs
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        assert not _alive(pid), "llama-server outlived the process that started it"
    finally:
        parent.kill()
        if pid and _alive(pid):  # do not leave it running when the assertion failed
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; it only waits for its (dead) parent's reaping.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][:1] != "Z"
