"""The gateway's answer cache (--cache FILE, --cache-mode), offline against fault servers on loopback: a
request asked before is answered from the file with no upstream request, /metrics counts the hits and
misses, /health says the cache's mode and never its path; two real ``python -m jevper.serve`` processes
sharing one file, writing and reading it at once, lose no answer."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from jevper._cache import AnswerCache
from jevper.serve import GatewayConfig, create_app
from jevper.serve.cli import parse, planned
from jevper.servers.process import free_port
from jevper.testing.faults import FaultServer, running

TOPIC = {"type": "choice", "criteria": {"billing": None, "shipping": None}}


def asked(state: str) -> dict[str, Any]:
    return {"state": state, "questions": {"topic": TOPIC}}


def posts(server: FaultServer) -> int:
    """The questions' requests the upstream was sent."""
    return sum(served.method == "POST" for served in server.log)


def sample(text: str, name: str, **labels: str) -> float:
    """A sample's value in Prometheus text, 0 when absent."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def upstream() -> Iterator[FaultServer]:
    with running(model="smollm2") as server:
        yield server


def gateway(server: FaultServer, cache: Path | None, **settings: Any) -> TestClient:
    config = GatewayConfig(
        upstream=server.base_url(),
        model="smollm2",
        api="chat_completions",
        cache=None if cache is None else str(cache),
        **settings,
    )
    return TestClient(create_app(config))


def test_a_request_asked_before_is_answered_from_the_cache_with_no_upstream_request(
    upstream: FaultServer, tmp_path: Path
) -> None:
    path = tmp_path / "answers.sqlite"
    with gateway(upstream, path) as client:
        first = client.post("/v1/systemone", json=asked("I was charged twice."))
        sent = posts(upstream)
        again = client.post("/v1/systemone", json=asked("I was charged twice."))
        metrics = client.get("/metrics").text
        health = client.get("/health")
    assert first.status_code == again.status_code == 200 and sent >= 1
    assert posts(upstream) == sent  # the hit sent nothing upstream
    assert again.json()["answers"] == first.json()["answers"]
    assert again.json()["usage"] == {"input_tokens": 0, "output_tokens": 0}
    route = "/v1/systemone"
    assert sample(metrics, "jevper_serve_cache_lookups_total", route=route, outcome="hit") == 1
    assert sample(metrics, "jevper_serve_cache_lookups_total", route=route, outcome="miss") == 1
    assert health.json()["cache"] == "read-write"
    # The file's place is the operator's: no response says it.
    assert str(tmp_path) not in health.text + first.text + again.text + metrics


def test_a_new_gateway_over_the_same_file_answers_what_an_earlier_one_asked(
    upstream: FaultServer, tmp_path: Path
) -> None:
    path = tmp_path / "answers.sqlite"
    with gateway(upstream, path) as client:
        assert client.post("/v1/systemone", json=asked("Where is my parcel?")).status_code == 200
    sent = posts(upstream)
    with gateway(upstream, path) as client:
        assert client.post("/v1/systemone", json=asked("Where is my parcel?")).status_code == 200
    assert posts(upstream) == sent


def test_cache_mode_read_answers_from_the_file_and_writes_nothing_to_it(
    upstream: FaultServer, tmp_path: Path
) -> None:
    path = tmp_path / "answers.sqlite"
    with gateway(upstream, path, cache_mode="read") as client:
        assert client.post("/v1/systemone", json=asked("a")).status_code == 200
        assert client.post("/v1/systemone", json=asked("a")).status_code == 200
        metrics = client.get("/metrics").text
        assert client.get("/health").json()["cache"] == "read"
    assert sample(metrics, "jevper_serve_cache_lookups_total", route="/v1/systemone", outcome="miss") == 2
    assert len(AnswerCache(str(path))) == 0


def test_without_a_cache_health_says_off_and_metrics_count_no_lookup(upstream: FaultServer) -> None:
    with gateway(upstream, None) as client:
        assert client.post("/v1/systemone", json=asked("a")).status_code == 200
        assert client.get("/health").json()["cache"] == "off"
        assert "jevper_serve_cache_lookups_total{" not in client.get("/metrics").text


def test_the_command_line_takes_the_cache_and_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    args = parse(["--upstream", "http://127.0.0.1:9/v1=m", "--cache", str(path), "--cache-mode", "write"])
    config = planned(args)
    assert (config.cache, config.cache_mode) == (str(path), "write")
    assert planned(parse(["--upstream", "http://127.0.0.1:9/v1=m"])).cache is None


# --- two gateway processes, one file ---------------------------------------------------------------

STATES = 40


def _started(upstream: FaultServer, path: Path) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    command = [sys.executable, "-m", "jevper.serve", "--upstream", f"{upstream.base_url()}=smollm2"]
    command += ["--api", "chat_completions", "--port", str(port), "--cache", str(path)]
    process = subprocess.Popen(
        [*command, "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the gateway exited {process.returncode}: {process.stderr.read()}")  # type: ignore[union-attr]
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError("the gateway did not answer /health within 60 s")


def test_two_gateway_processes_sharing_one_cache_file_at_once_lose_no_answer(
    upstream: FaultServer, tmp_path: Path
) -> None:
    path = tmp_path / "answers.sqlite"
    gateways = [_started(upstream, path) for _ in range(2)]
    try:
        urls = [url for _, url in gateways]
        states = [f"ticket {i}: I was charged {i} times." for i in range(STATES)]

        def ask(job: tuple[str, str]) -> dict[str, Any]:
            url, state = job
            answered = httpx.post(f"{url}/v1/systemone", json=asked(state), timeout=60)
            assert answered.status_code == 200, answered.text
            reply: dict[str, Any] = answered.json()
            return reply

        # Both write at once: the states dealt between the two, asked eight at a time.
        with ThreadPoolExecutor(8) as pool:
            first = list(pool.map(ask, [(urls[i % 2], state) for i, state in enumerate(states)]))
        sent = posts(upstream)
        assert sent >= STATES
        # Both read at once, each every state: half of them the other process wrote.
        with ThreadPoolExecutor(8) as pool:
            again = list(pool.map(ask, [(url, state) for state in states for url in urls]))
        assert posts(upstream) == sent  # every answer was in the file: nothing was asked again
        assert [a["answers"] for a in again] == [f["answers"] for f in first for _ in urls]
        for url in urls:
            metrics = httpx.get(f"{url}/metrics").text
            hits = sample(metrics, "jevper_serve_cache_lookups_total", route="/v1/systemone", outcome="hit")
            misses = sample(
                metrics, "jevper_serve_cache_lookups_total", route="/v1/systemone", outcome="miss"
            )
            assert (hits, misses) == (STATES, STATES / 2)
    finally:
        for process, _ in gateways:
            process.terminate()
        for process, _ in gateways:
            process.wait(30)
    assert len(AnswerCache(str(path))) >= STATES
