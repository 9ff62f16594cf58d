"""Send probes one by one through a vcrpy cassette each, and only record: grading is ``grading``'s.

A probe that fails does not stop the run.

A timeout or a broken connection is recorded as that probe's outcome and the run goes on; a server
that stops accepting connections ends the run, and every probe left is reported as not run. The timeout
bounds each request's whole answer, not only each read: a watchdog shuts the connection down at the
deadline, so a server that drips its body cannot hold a probe (vcrpy reads the body inside the transport).
Each request of a wave says so in WAVE_HEADER (the wave's size), which a cassette does not keep: a test
server can hold them until the wave has met instead of holding every answer.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

import httpx
import vcr

from jevper import _deadline
from jevper.probe.cassettes import cassette
from jevper.probe.catalogue import Catalogue, Probe
from jevper.probe.classifiers import Verdict
from jevper.probe.compose import ProbeRequest, requests_for
from jevper.probe.presets import Preset

#: Sent with each request of a wave, saying how many requests the wave holds.
WAVE_HEADER = "x-jevper-wave"


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
    with cassette(recorder, path) as active:
        for wave in _waves(requests_for(probe, catalogue, preset)):
            if len(wave) == 1:
                answers = [_send(client, wave[0])]
            else:
                before = len(active.data)
                with ThreadPoolExecutor(len(wave), thread_name_prefix="probe-wave") as pool:
                    answers = list(pool.map(_send, repeat(client), wave, repeat(len(wave))))
                _in_sent_order(active.data, before, wave)
            failure = next((f for _, f in answers if f is not None), None)
            if failure is not None:
                status = None
                break
            status = answers[0][0]
    elapsed = round(time.monotonic() - started, 2)
    if failure is not None:
        # Half a probe is not a recording: its cassette goes, its outcome stays in the results.
        path.unlink(missing_ok=True)
        return Sent(probe, None, elapsed, failure)
    return Sent(probe, status, elapsed)


def _waves(requests: Sequence[ProbeRequest]) -> list[list[ProbeRequest]]:
    """The requests in the groups they are sent in: one alone, or a wave of neighbours sent together."""
    waves: list[list[ProbeRequest]] = []
    for request in requests:
        if waves and request.wave is not None and waves[-1][-1].wave == request.wave:
            waves[-1].append(request)
        else:
            waves.append([request])
    return waves


def _in_sent_order(data: list[Any], before: int, wave: Sequence[ProbeRequest]) -> None:
    """A wave's exchanges are appended to the cassette as their answers come; put them in the order
    the plan sends them, so a cassette reads the same whichever request finished first."""
    recorded = data[before:]

    def rank(entry: Any) -> int:
        body = entry[0].body
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        with contextlib.suppress(ValueError, TypeError):
            parsed = json.loads(text or "null")
            return next(i for i, request in enumerate(wave) if request.json_body == parsed)
        return len(wave)

    data[before:] = sorted(recorded, key=rank)


def _send(client: httpx.Client, request: ProbeRequest, wave: int = 1) -> tuple[int | None, Verdict | None]:
    """One request (one of a wave of `wave` sent together): its status, or why it got no whole answer."""
    headers = {"content-type": "application/json"}
    if wave > 1:
        headers[WAVE_HEADER] = str(wave)
    alarm = _deadline.start(client.timeout.read or 60.0)
    try:
        response = client.request(
            request.method,
            request.path.lstrip("/"),
            content=request.content,
            headers=headers,
            extensions={"trace": _watching(alarm)},
        )
        return response.status_code, None
    except httpx.TimeoutException:
        return None, Verdict("timeout", f"no answer within {client.timeout.read} s", "")
    except httpx.ConnectError as exc:
        return None, Verdict("not-run", f"not run: could not connect ({exc})", "")
    except httpx.TransportError as exc:
        if alarm.fired:
            return None, Verdict(
                "timeout", f"no whole answer within {client.timeout.read} s: cut off at the deadline", ""
            )
        if not _accepts_connections(str(client.base_url)):
            # A dead server breaks the pooled connection first; that is not an answer either.
            return None, Verdict("not-run", "not run: the server stopped accepting connections", "")
        return None, Verdict("fault", f"the connection broke: {type(exc).__name__}: {exc}", "")
    finally:
        _deadline.stop(alarm)


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
