"""Probe-run time: the whole catalogue live against the embedded server, wall time against the server's own.

The harness runs exactly as ``python -m jevper.probe --server llamacpp --spawn`` would, into a scratch
folder. Every request is timed where it leaves and re-enters the process (httpx's transport), and the
server's own compute is read from the ``timings`` llama.cpp puts in its bodies (prompt + generation
milliseconds) before the recorder prunes them.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import vcr.patch as vcr_patch
from _report import Figure, Section, load_average

from jevper.probe.catalogue import load_catalogue
from jevper.probe.presets import get_preset
from jevper.probe.recording import Layout
from jevper.probe.session import Target, record
from jevper.servers.llamacpp import DEFAULT_RELEASE, spawn_llamacpp

TARGET = 1.2


@dataclass
class _Wire:
    round_trips: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)  # one per request that reported timings
    untimed: list[str] = field(default_factory=list)  # paths of requests whose body had no timings


def _server_ms(content: bytes) -> float | None:
    try:
        body: Any = json.loads(content)
    except ValueError:
        return None
    timings = body.get("timings") if isinstance(body, dict) else None
    if not isinstance(timings, dict) or "prompt_ms" not in timings:
        return None
    return float(timings["prompt_ms"]) + float(timings.get("predicted_ms", 0.0))


@contextlib.contextmanager
def _timed_transport() -> Iterator[_Wire]:
    """Time every request at the transport: from handing it over to having the whole body back.

    vcrpy keeps its own reference to the real transport method and calls that while recording, so
    the timing wrapper replaces it there as well as on the class.
    """
    wire = _Wire()
    original = httpx.HTTPTransport.handle_request

    def handle_request(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        started = time.perf_counter()
        response = original(self, request)
        stream = response.stream
        assert isinstance(stream, httpx.SyncByteStream)
        content = b"".join(stream)
        stream.close()
        wire.round_trips.append(time.perf_counter() - started)
        response.stream = httpx.ByteStream(content)
        ms = _server_ms(content)
        if ms is None:
            wire.untimed.append(f"{request.method} {request.url.path} {response.status_code}")
        else:
            wire.server_ms.append(ms)
        return response

    httpx.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign]
    vcr_patch._HttpxHttpTransport_handle_request = handle_request
    try:
        yield wire
    finally:
        httpx.HTTPTransport.handle_request = original  # type: ignore[method-assign]
        vcr_patch._HttpxHttpTransport_handle_request = original


def run() -> Section:
    catalogue = load_catalogue()
    probes = catalogue.select(None)
    with spawn_llamacpp() as server, tempfile.TemporaryDirectory() as scratch:
        preset = get_preset("llamacpp").with_overrides(base_url=server.base_url, model=server.model)
        target = Target(
            preset=preset, release=server.version, model_name=server.model_name, command="scripts/bench probe"
        )
        load_before = load_average()
        with _timed_transport() as wire:
            started = time.perf_counter()
            report = record(
                target,
                probes,
                catalogue=catalogue,
                layout=Layout.out(Path(scratch)),
                api_key=None,
                timeout=120.0,
            )
            wall = time.perf_counter() - started
    load = load_average()
    compute = sum(wire.server_ms) / 1000
    trips = sum(wire.round_trips)
    ratio = wall / compute
    answered = sum(1 for r in report.recording.probes if r.outcome not in ("not-run", "timeout", "fault"))
    return Section(
        key="probe",
        title="Probe-run time",
        command="scripts/bench probe",
        figures=[
            Figure(
                "probe run: wall time ÷ the server's request times (round trips)",
                wall / trips,
                "x",
                f"≤ {TARGET}x",
                wall / trips <= TARGET,
                load,
                f"round trips on loopback (request handed to httpx's transport → whole body back) sum to "
                f"{trips:.2f} s; the rest, {wall - trips:.2f} s, is the harness: cassettes, verdicts, "
                "results; "
                f"load average {' / '.join(map(str, load_before))} before the run",
            ),
            Figure(
                "probe run: wall time ÷ the server's reported compute (`timings`)",
                ratio,
                "x",
                "",
                None,
                load,
                f"{len(probes)} probes ({answered} answered), {len(wire.round_trips)} requests in "
                f"{wall:.2f} s; the server's `timings` (prompt + generation) sum to {compute:.2f} s over "
                f"the {len(wire.server_ms)} requests that report them (Messages and Responses bodies and "
                "errors carry none, so this understates the server's time)",
            ),
        ],
        notes=[
            f"The embedded llama.cpp ({DEFAULT_RELEASE}, `--ctx-size 4096 -np 1 --jinja`), "
            "the whole catalogue, "
            "recorded into a scratch folder exactly as `python -m jevper.probe --server llamacpp --spawn` "
            "does (server start-up and report rendering excluded). Requests without `timings` in "
            f"their body (errors, and routes that do not report them) count as zero server compute: "
            f"{len(wire.untimed)} here"
            + (f" ({', '.join(sorted(set(wire.untimed))[:8])}…)." if wire.untimed else "."),
        ],
    )


if __name__ == "__main__":
    section = run()
    for figure in section.figures:
        print(figure.name, figure.shown(), figure.detail)
    print(section.notes)
