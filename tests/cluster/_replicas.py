"""The gateway as replicas, for the cluster tests and the cluster benchmark: three ``python -m
jevper.serve`` processes with one key set behind Debian's HAProxy, run with the configuration the docs
ship (docs/examples/haproxy.cfg, its ports changed), the upstream a scripted fault server answering
after UPSTREAM_DELAY_S; clients that ask as the SDKs do (a connection error or a 502, 503 or 504 asked
again, a few times), and one replica SIGKILLed under that load."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from _cluster import Sessions, free_port, wait_for

from jevper.testing.bodies import chat_label
from jevper.testing.faults import FaultServer, running
from jevper.testing.script import Script

ROOT = Path(__file__).parents[2]
CONFIG = ROOT / "docs" / "examples" / "haproxy.cfg"
KEY = "sk-replicas-3b9f"
ASKED = {
    "state": "I was charged twice.",
    "questions": {"topic": {"type": "choice", "criteria": {"billing": None, "shipping": None}}},
}
REQUESTS, CLIENTS = 300, 8
#: Each upstream answer waits this long, so a replica is killed with requests in flight.
UPSTREAM_DELAY_S = 0.05
#: As the openai SDK asks again (its default is 2 retries; a few more, as a patient client's).
RETRIES, RETRIED_STATUSES = 4, (502, 503, 504)


@dataclass
class Asked:
    status: int | None
    replica: str
    attempts: int
    started: float = 0.0  # time.monotonic() at the first attempt
    ended: float = 0.0  # and when the answer (or the last failure) came


@dataclass
class Replicas:
    sessions: Sessions
    upstream: str
    front: int
    ports: dict[str, int]
    script: Script
    env: dict[str, str] = field(default_factory=dict)

    def start(self, name: str) -> None:
        command = [sys.executable, "-m", "jevper.serve", "--upstream", f"{self.upstream}=smollm2"]
        command += ["--api", "chat_completions", "--port", str(self.ports[name]), "--log-level", "warning"]
        self.sessions.start(name, command, self.env)
        wait_for(f"replica {name}'s /health", lambda: self.healthy(name), 60, every=0.2)

    def healthy(self, name: str) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.ports[name]}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def answered(self, name: str) -> Counter[str]:
        """The replica's own count of its /v1/systemone answers, by status (its /metrics)."""
        text = httpx.get(f"http://127.0.0.1:{self.ports[name]}/metrics", timeout=5).text
        found: Counter[str] = Counter()
        for status, value in re.findall(
            r'^jevper_serve_requests_total\{route="/v1/systemone",status="(\d+)"\} (\S+)$', text, re.M
        ):
            found[status] += int(float(value))
        return found

    def ask(self) -> Asked:
        """One request through HAProxy, asked again on a connection error or a 502, 503 or 504."""
        headers = {"authorization": f"Bearer {KEY}"}
        started = time.monotonic()
        for attempt in range(1, RETRIES + 2):
            try:
                answer = httpx.post(
                    f"http://127.0.0.1:{self.front}/v1/systemone", json=ASKED, headers=headers, timeout=30
                )
            except httpx.TransportError:
                status, replica = None, ""
            else:
                status, replica = answer.status_code, answer.headers.get("x-jevper-replica", "")
                if status not in RETRIED_STATUSES:
                    return Asked(status, replica, attempt, started, time.monotonic())
            time.sleep(min(0.5 * 2 ** (attempt - 1), 4.0))
        return Asked(status, replica, RETRIES + 1, started, time.monotonic())


def configured(front: int, ports: dict[str, int]) -> str:
    """The shipped configuration with the given ports."""
    text = CONFIG.read_text()
    text, bound = re.subn(r"bind 127\.0\.0\.1:\d+", f"bind 127.0.0.1:{front}", text)
    assert bound == 1, "docs/examples/haproxy.cfg: expected one bind line"
    for name, port in ports.items():
        text, changed = re.subn(rf"server {name} 127\.0\.0\.1:\d+", f"server {name} 127.0.0.1:{port}", text)
        assert changed == 1, f"docs/examples/haproxy.cfg: expected one server {name}"
    return text


@contextlib.contextmanager
def replicas(folder: Path) -> Iterator[Replicas]:
    """r1, r2 and r3 behind HAProxy, each seen up by HAProxy's checks; every process killed after."""
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not Path(haproxy).exists():
        pytest.fail("expected HAProxy installed (apt-get install haproxy), got no haproxy command")
    script = Script(delay=UPSTREAM_DELAY_S)
    for _ in range(REQUESTS * 20):
        script.reply("/chat/completions", 200, chat_label())
    sessions = Sessions(folder)
    upstream: FaultServer
    with running(script=script, model="smollm2") as upstream:
        ports = {name: free_port() for name in ("r1", "r2", "r3")}
        env = {**os.environ, "JEVPER_SERVE_API_KEYS": KEY}
        made = Replicas(sessions, upstream.base_url(), free_port(), ports, script, env)
        try:
            for name in ports:
                made.start(name)
            config = folder / "haproxy.cfg"
            config.write_text(configured(made.front, ports))
            sessions.start("haproxy", [haproxy, "-f", str(config), "-db"], env)
            wait_for("HAProxy's frontend", lambda: made.ask().status == 200, 30, every=0.5)
            # Each replica seen up by HAProxy's checks (inter 1s, rise 2) before the load starts.
            time.sleep(2.5)
            yield made
        finally:
            sessions.close()


@dataclass(frozen=True)
class ReplicaKilled:
    """REQUESTS asked by CLIENTS with ``victim`` SIGKILLed after a third of them: each request, the
    kill's time, and the survivors' own counts of their answers since before the load."""

    results: list[Asked]
    killed_at: float
    counted: dict[str, Counter[str]]
    upstream_asked: int

    def recovered_s(self) -> float:
        """From the kill to the answer of the last request that was in flight at it: how long the
        clients the dead replica held waited after it died (0 with none in flight)."""
        held = [r.ended for r in self.results if r.started <= self.killed_at <= r.ended]
        return max(held, default=self.killed_at) - self.killed_at


def kill_one_under_load(cluster: Replicas, victim: str = "r2") -> ReplicaKilled:
    before = {name: cluster.answered(name) for name in cluster.ports if name != victim}
    upstream_before = len(cluster.script.requests)
    done = threading.Semaphore(0)

    def one(_: int) -> Asked:
        asked = cluster.ask()
        done.release()
        return asked

    with ThreadPoolExecutor(CLIENTS) as pool:
        futures = [pool.submit(one, i) for i in range(REQUESTS)]
        for _ in range(REQUESTS // 3):
            done.acquire()
        killed_at = time.monotonic()
        cluster.sessions.kill(victim)
        results = [future.result() for future in futures]
    counted = {name: cluster.answered(name) - earlier for name, earlier in before.items()}
    return ReplicaKilled(results, killed_at, counted, len(cluster.script.requests) - upstream_before)
