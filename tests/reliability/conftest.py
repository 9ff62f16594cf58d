"""The fault server, started once per module on a free loopback port (and one whose busy answers ask for
no wait)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jevper.testing.faults import FaultServer, running


@pytest.fixture(scope="module")
def faults() -> Iterator[FaultServer]:
    with running() as server:
        yield server


@pytest.fixture(scope="module")
def faults_at_once() -> Iterator[FaultServer]:
    """A fault server whose 502, 503 and 429 answers say Retry-After: 0, for the fault matrices: they count
    the retries and bound the call, and the wait a Retry-After asks for has tests of its own
    (test_a_busy_server_that_recovers_is_answered_after_the_retry_after_wait, in each module)."""
    with running(retry_after=0) as server:
        yield server
