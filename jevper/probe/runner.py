"""Send probes one by one through a vcrpy cassette each, and only record: grading is ``grading``'s.

A probe that fails does not stop the run.

A timeout or a broken connection is recorded as that probe's outcome and the run goes on; a server
that stops accepting connections ends the run, and every probe left is reported as not run. The timeout
bounds each request's whole answer, not only each read: a watchdog shuts the connection down at the
deadline, so a server that drips its body cannot hold a probe (vcrpy reads the body inside the transport).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import vcr

from jevper import _deadline
from jevper.probe.cassettes import cassette
from jevper.probe.catalogue import Catalogue, Probe
from jevper.probe.classifiers import Verdict
from jevper.probe.compose import requests_for
from jevper.probe.presets import Preset


@dataclass(frozen=True)
class Sent:
    """What sending one probe left: its cassette (unless `failure` says why it got no whole answer)."""

    probe: Probe
    status: int | None  # the status of the probe's own (last) request; None without one
    elapsed_s: float
    failure: Verdict | None = None  # timeout, fault or not-run, when no cassette was kept

    @property
    def outcome(self) -> str:
        return "recorded" if self.failure is None else self.failure.outcome


#: Called after each probe is sent with (index, total, sent); a test can stop the server from here.
Progress = Callable[[int, int, Sent], None]


def record_probes(
    probes: Sequence[Probe],
    *,
    catalogue: Catalogue,
    preset: Preset,
    recorder: vcr.VCR,
    cassette_of: Callable[[Probe], Path],
    headers: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    progress: Progress | None = None,
) -> list[Sent]:
    """Every probe in order; each leaves a cassette at `cassette_of(probe)` unless it got no whole
    answer. Nothing here reads what came back: that is the grading pass."""
    runs: list[Sent] = []
    unreachable = False
    # No kept-alive connections: each request's own connection is the one its deadline can shut down.
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(
        base_url=preset.base_url + "/", headers=dict(headers or {}), timeout=timeout, limits=limits
    ) as client:
        for index, probe in enumerate(probes, 1):
            if unreachable:
                run = Sent(probe, None, 0.0, Verdict("not-run", "not run: the server stopped answering", ""))
            else:
                run = _send_one(client, probe, catalogue, preset, recorder, cassette_of(probe))
                unreachable = run.outcome == "not-run"
            runs.append(run)
            if progress is not None:
                progress(index, len(probes), run)
    return runs


def _send_one(
    client: httpx.Client,
    probe: Probe,
    catalogue: Catalogue,
    preset: Preset,
    recorder: vcr.VCR,
    path: Path,
) -> Sent:
    failure: Verdict | None = None
    status: int | None = None
    started = time.monotonic()
    with cassette(recorder, path):
        for request in requests_for(probe, catalogue, preset):
            alarm = _deadline.start(client.timeout.read or 60.0)
            try:
                response = client.request(
                    request.method,
                    request.path.lstrip("/"),
                    content=request.content,
                    headers={"content-type": "application/json"},
                    extensions={"trace": _watching(alarm)},
                )
                status = response.status_code
            except httpx.TimeoutException:
                failure = Verdict("timeout", f"no answer within {client.timeout.read} s", "")
            except httpx.ConnectError as exc:
                failure = Verdict("not-run", f"not run: could not connect ({exc})", "")
            except httpx.TransportError as exc:
                failure = Verdict("fault", f"the connection broke: {type(exc).__name__}: {exc}", "")
                if alarm.fired:
                    failure = Verdict(
                        "timeout",
                        f"no whole answer within {client.timeout.read} s: cut off at the deadline",
                        "",
                    )
                elif not _accepts_connections(str(client.base_url)):
                    # A dead server breaks the pooled connection first; that is not an answer either.
                    failure = Verdict("not-run", "not run: the server stopped accepting connections", "")
            finally:
                _deadline.stop(alarm)
            if failure is not None:
                status = None
                break
    elapsed = round(time.monotonic() - started, 2)
    if failure is not None:
        # Half a probe is not a recording: its cassette goes, its outcome stays in the results.
        path.unlink(missing_ok=True)
        return Sent(probe, None, elapsed, failure)
    return Sent(probe, status, elapsed)


def _watching(alarm: _deadline.Alarm) -> Callable[[str, Mapping[str, Any]], None]:
    """An httpcore trace hook that hands each new connection to the request's deadline."""

    def trace(event: str, info: Mapping[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            _deadline.watch(alarm, info.get("return_value"))

    return trace


def _accepts_connections(base_url: str) -> bool:
    try:
        with httpx.Client(timeout=5.0) as fresh:
            fresh.get(base_url)
    except httpx.ConnectError:
        return False
    except httpx.HTTPError:
        return True
    return True
