"""The gateway as replicas (_replicas.py: three ``python -m jevper.serve`` behind HAProxy, run with
docs/examples/haproxy.cfg). Under a fixed load asked as the SDKs ask, a replica SIGKILLed loses no
request and the survivors' /metrics count every answer they gave; a rolling restart (each replica stopped
with SIGTERM and started again, one after another) costs no request, not even a client's retry. Runs
with scripts/cluster, inside a loopback-only network namespace.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cluster import loopback_only
from _replicas import CLIENTS, REQUESTS, Asked, Replicas, kill_one_under_load, replicas

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Replicas]:
    loopback_only()
    with replicas(tmp_path) as made:
        yield made


def test_a_replica_killed_under_load_loses_no_request_and_the_survivors_metrics_count_each_answer(
    cluster: Replicas,
) -> None:
    run = kill_one_under_load(cluster, "r2")
    statuses = Counter(r.status for r in run.results)
    by_replica = Counter(r.replica for r in run.results)
    retried = sum(r.attempts > 1 for r in run.results)
    print(
        f"\nreplica killed: {REQUESTS} requests, statuses {dict(statuses)}, answered by {dict(by_replica)}, "
        f"{retried} asked again by the client; the upstream asked {run.upstream_asked} times; the last "
        f"request in flight at the kill answered {run.recovered_s():.2f} s after it"
    )
    assert statuses == Counter({200: REQUESTS}), statuses
    for name in ("r1", "r3"):
        counted = run.counted[name]
        assert counted["200"] == by_replica[name], (name, counted, by_replica)
        assert sum(n for status, n in counted.items() if status != "200") == 0, (name, counted)
    # What the survivors did not answer, the killed replica did before it died: every answer accounted.
    assert by_replica["r1"] + by_replica["r3"] + by_replica["r2"] == REQUESTS
    assert by_replica["r2"] > 0 and by_replica["r1"] > 0 and by_replica["r3"] > 0


def test_a_rolling_restart_of_every_replica_under_load_drops_no_request(cluster: Replicas) -> None:
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
