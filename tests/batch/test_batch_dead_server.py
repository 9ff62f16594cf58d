"""A server that is not there: the batch says so at once, on stderr by Python's own last-resort handler
(a script that sets up no logging sees it), rather than leaving its caller in silence for the whole
patience its rows wait for a restart."""

from __future__ import annotations

import logging
import socket
import time

import pyarrow as pa
import pytest

from jevper.batch import BatchClassifier, Server

QUESTIONS = {"topic": {"type": "choice", "criteria": {"billing": "about a charge", "other": "anything else"}}}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_dead_server_is_said_within_seconds_while_its_rows_wait_out_the_patience(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    heard: list[float] = []

    class Timed(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            heard.append(time.monotonic() - started)

    timed = Timed(logging.WARNING)
    logging.getLogger("jevper.upstreams").addHandler(timed)
    batcher = BatchClassifier(QUESTIONS, [Server(url, "m", slots=2)], patience=2.0)
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="jevper.upstreams"):
            out = batcher.classify_sync(pa.table({"id": [1, 2], "state": ["charged twice", "thanks"]}))
    finally:
        took = time.monotonic() - started
        batcher.close()
        logging.getLogger("jevper.upstreams").removeHandler(timed)
    # The rows still wait out the patience (a restart is ridden out), then fail, each naming the server.
    errors = out.column("error").to_pylist()
    assert all(e is not None and url in e["message"] for e in errors), errors
    assert 2.0 <= took < 13.0
    # Said once, within seconds of the start (it was said nowhere before the rows failed).
    said = [r.getMessage() for r in caplog.records if r.name == "jevper.upstreams"]
    assert len(said) == 1, said
    assert said[0].startswith(f"{url}: ProviderError: ")
    assert "calls wait up to 2 s for it to answer (a restart) before they fail" in said[0]
    # Well before the patience is over (a refused connection fails at once).
    assert heard and heard[0] < 1.5
