"""/health tells whether the upstreams can be reached before any request fails on them: the gateway checks
each at start-up and, while it is in, in the background; and the gateway's log carries no httpx lines."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest
from starlette.testclient import TestClient

from jevper.serve import GatewayConfig, create_app
from jevper.servers.process import free_port
from jevper.testing.faults import FaultServer

ONE = {"state": "charged twice", "questions": {"q": {"type": "noul", "instructions": "Angry?"}}}


def test_a_gateway_whose_every_upstream_is_unreachable_says_so_from_its_first_health_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    config = GatewayConfig(upstream=dead, model="m", recheck_s=60)
    with caplog.at_level(logging.WARNING), TestClient(create_app(config)) as client:
        state = client.get("/health")
    assert state.status_code == 503, state.text
    assert state.json()["status"] == "no upstream in"
    assert state.json()["upstreams"] == {"in": 0, "out": 1}
    assert any(
        "cannot be reached" in r.getMessage() and "127.0.0.1" in r.getMessage() for r in caplog.records
    )


def test_a_gateway_with_one_upstream_unreachable_is_serving_and_counts_it_out(upstream: FaultServer) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    config = GatewayConfig(upstream=upstream.base_url(), model="smollm2", more_upstreams=((dead, "smollm2"),))
    with TestClient(create_app(config)) as client:
        state = client.get("/health")
        assert state.status_code == 200, state.text
        assert state.json()["upstreams"] == {"in": 1, "out": 1}
        assert client.post("/v1/systemone", json=ONE).status_code == 200


def test_an_upstream_that_goes_away_while_no_request_comes_is_counted_out_by_the_background_check() -> None:
    port = free_port()
    server = FaultServer(model="smollm2", port=port).start()
    config = GatewayConfig(
        upstream=f"http://127.0.0.1:{port}/v1", model="smollm2", check_s=0.2, recheck_s=0.2
    )
    try:
        with TestClient(create_app(config)) as client:
            assert client.get("/health").status_code == 200
            server.stop()
            deadline = time.monotonic() + 10
            while client.get("/health").status_code == 200:
                assert time.monotonic() < deadline, "still 200 with the upstream gone"
                time.sleep(0.1)
            assert client.get("/health").json()["upstreams"] == {"in": 0, "out": 1}
            server = FaultServer(model="smollm2", port=port).start()  # back: in again
            while client.get("/health").status_code != 200:
                assert time.monotonic() < deadline + 10, "still out with the upstream back"
                time.sleep(0.1)
    finally:
        server.stop()


@pytest.mark.parametrize("level", ["info", "debug"])
def test_the_gateways_log_carries_no_httpx_request_lines(upstream: FaultServer, level: str) -> None:
    # httpx writes a line per request at INFO (five of them led a --spawn gateway's log), naming the URL
    # whole, a query's values with it. A process of its own, as the gateway's: logging is set up once.
    script = (
        "import sys, httpx\n"
        "from jevper.serve.observe import configure_logging\n"
        "configure_logging(sys.argv[1])\n"
        "httpx.get(sys.argv[2])\n"
        "import logging; logging.getLogger('httpx').warning('still said')\n"
    )
    url = upstream.base_url() + "/models?key=secretvalue"
    done = subprocess.run(
        [sys.executable, "-c", script, level, url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "HTTP Request" not in done.stderr and "secretvalue" not in done.stderr, done.stderr
    assert "still said" in done.stderr  # its warnings are still written
