"""The gateway as replicas: three ``python -m jevper.serve`` processes with one key set behind Debian's
HAProxy, run with the configuration the docs ship (docs/examples/haproxy.cfg, its ports changed), the
upstream a scripted fault server. Under a fixed load asked as the SDKs ask (a connection error or a 502,
503 or 504 asked again, a few times), a replica SIGKILLed loses no request and the survivors' /metrics
count every answer they gave; a rolling restart (each replica stopped with SIGTERM and started again, one
after another) costs no request, not even a client's retry. Runs with scripts/cluster, inside a
loopback-only network namespace.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
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
from _cluster import Sessions, free_port, loopback_only, wait_for

from jevper.testing.bodies import chat_label
from jevper.testing.faults import FaultServer, running
from jevper.testing.script import Script

pytestmark = pytest.mark.cluster

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


@dataclass
class Cluster:
    sessions: Sessions
    upstream: str
    front: int
    ports: dict[str, int]
    script: Script
    env: dict[str, str] = field(default_factory=dict)

    def start(self, name: str) -> None:
        command = [
            sys.executable,
            "-m",
            "jevper.serve",
            "--upstream",
            f"{self.upstream}=smollm2",
            "--api",
            "chat_completions",
            "--port",
            str(self.ports[name]),
            "--log-level",
            "warning",
        ]
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
                    return Asked(status, replica, attempt)
            time.sleep(min(0.5 * 2 ** (attempt - 1), 4.0))
        return Asked(status, replica, RETRIES + 1)


def configured(front: int, ports: dict[str, int]) -> str:
    """The shipped configuration with the test's ports."""
    text = CONFIG.read_text()
    text, bound = re.subn(r"bind 127\.0\.0\.1:\d+", f"bind 127.0.0.1:{front}", text)
    assert bound == 1, "docs/examples/haproxy.cfg: expected one bind line"
    for name, port in ports.items():
        text, changed = re.subn(rf"server {name} 127\.0\.0\.1:\d+", f"server {name} 127.0.0.1:{port}", text)
        assert changed == 1, f"docs/examples/haproxy.cfg: expected one server {name}"
    return text


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    loopback_only()
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not Path(haproxy).exists():
        pytest.fail("expected HAProxy installed (apt-get install haproxy), got no haproxy command")
    script = Script(delay=UPSTREAM_DELAY_S)
    for _ in range(REQUESTS * 20):
        script.reply("/chat/completions", 200, chat_label())
    sessions = Sessions(tmp_path)
    upstream: FaultServer
    with running(script=script, model="smollm2") as upstream:
        ports = {name: free_port() for name in ("r1", "r2", "r3")}
        env = {**os.environ, "JEVPER_SERVE_API_KEYS": KEY}
        made = Cluster(sessions, upstream.base_url(), free_port(), ports, script, env)
        try:
            for name in ports:
                made.start(name)
            config = tmp_path / "haproxy.cfg"
            config.write_text(configured(made.front, ports))
            sessions.start("haproxy", [haproxy, "-f", str(config), "-db"], env)
            wait_for("HAProxy's frontend", lambda: made.ask().status == 200, 30, every=0.5)
            # Each replica seen up by HAProxy's checks (inter 1s, rise 2) before the load starts.
            time.sleep(2.5)
            yield made
        finally:
            sessions.close()


def test_a_replica_killed_under_load_loses_no_request_and_the_survivors_metrics_count_each_answer(
    cluster: Cluster,
) -> None:
    before = {name: cluster.answered(name)["200"] for name in cluster.ports}
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
        cluster.sessions.kill("r2")
        results = [future.result() for future in futures]
    statuses = Counter(r.status for r in results)
    by_replica = Counter(r.replica for r in results)
    retried = sum(r.attempts > 1 for r in results)
    upstream_asked = len(cluster.script.requests)
    print(
        f"\nreplica killed: {REQUESTS} requests, statuses {dict(statuses)}, answered by {dict(by_replica)}, "
        f"{retried} asked again by the client; the upstream asked {upstream_asked} times "
        f"(killed {time.monotonic() - killed_at:.1f} s before the last answer)"
    )
    assert statuses == Counter({200: REQUESTS}), statuses
    for name in ("r1", "r3"):
        counted = cluster.answered(name)
        assert counted["200"] - before[name] == by_replica[name], (name, counted, by_replica)
        assert sum(n for status, n in counted.items() if status != "200") == 0, (name, counted)
    # What the survivors did not answer, the killed replica did before it died: every answer accounted.
    assert by_replica["r1"] + by_replica["r3"] + by_replica["r2"] == REQUESTS
    assert by_replica["r2"] > 0 and by_replica["r1"] > 0 and by_replica["r3"] > 0


def test_a_rolling_restart_of_every_replica_under_load_drops_no_request(cluster: Cluster) -> None:
    restarting = threading.Event()
    restarting.set()
    results: list[Asked] = []
    lock = threading.Lock()

    def client() -> None:
        while restarting.is_set():
            asked = cluster.ask()
            with lock:
                results.append(asked)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        for name in cluster.ports:
            process = cluster.sessions.started[name]
            # Uvicorn stops accepting, answers what it holds, then exits by the signal it was sent.
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) in (0, -signal.SIGTERM)
            cluster.start(name)
            time.sleep(2.5)  # HAProxy sees it up again (inter 1s, rise 2) before the next goes down
    finally:
        restarting.clear()
        for thread in threads:
            thread.join(timeout=60)
    statuses = Counter(r.status for r in results)
    retried = sum(r.attempts > 1 for r in results)
    by_replica = Counter(r.replica for r in results)
    print(
        f"\nrolling restart: {len(results)} requests, statuses {dict(statuses)}, answered by "
        f"{dict(by_replica)}, {retried} asked again by the client"
    )
    assert statuses == Counter({200: len(results)}), statuses
    assert retried == 0, f"{retried} requests needed the client's retry"
    assert len(results) > 100
