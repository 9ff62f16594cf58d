"""The test servers' loopback scaffolding stops at once: every test that starts one stops it."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

from jevper.testing.loopback import POLL_S, LoopbackServer


def _answer(method: str, path: str, body: Any, size: int) -> tuple[int, Any]:
    return 200, {"method": method, "path": path}


def test_a_loopback_server_answers_and_stops_within_a_few_polls() -> None:
    stops = []
    for _ in range(3):
        server = LoopbackServer(_answer, "stops-at-once")
        server.start()
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as response:
            assert response.status == 200
        started = time.monotonic()
        server.stop()
        stops.append(time.monotonic() - started)
    # The standard library's poll of 0.5 s made every stop right after a request take about that long;
    # the quickest of three, so that one stall of a loaded machine does not decide.
    assert min(stops) < max(5 * POLL_S, 0.25), stops
