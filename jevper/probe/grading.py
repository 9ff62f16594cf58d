"""The grading pass: a folder of cassettes in, verdicts out; the same code after a live run and offline.

Recording only records (``runner``); this reads what was recorded. For each probe its cassette is
checked against the requests the catalogue composes today (a probe changed since it was recorded
must be recorded again), then read by the probe's classifier and compared with the reference. A
probe that got no whole answer has no cassette: its outcome is what sending it said. A classifier
that raises, or a cassette that cannot be read, costs that probe its verdict (`ungraded`, naming
what went wrong), never another probe's verdict, and never the recording.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from jevper.probe import dialects
from jevper.probe.cassettes import CassetteError, Exchange, load_exchanges
from jevper.probe.catalogue import Catalogue, Probe
from jevper.probe.classifiers import Verdict, classify
from jevper.probe.compose import ProbeRequest, requests_for
from jevper.probe.presets import Preset, get_preset
from jevper.probe.recording import ProbeResult, Recording
from jevper.probe.reference import annotate

#: Where a replayed recording says its requests went when its provenance does not say.
DEFAULT_BASE_URL = "http://127.0.0.1/v1"
STALE = "the request is not in the cassette; record it again"


@dataclass(frozen=True)
class Answer:
    """What grading needs of a probe besides its cassette: why it has none, and how long it took."""

    elapsed_s: float | None
    failure: Verdict | None = None  # timeout, fault or not-run: sending got no whole answer


def preset_of(recording: Recording) -> Preset:
    """The preset the recording's requests were composed for: its server kind, base URL and model."""
    base_url = recording.run.base_url or DEFAULT_BASE_URL
    return get_preset(recording.server).with_overrides(base_url=base_url, model=recording.model)


def grade(
    recording: Recording,
    probes: Sequence[Probe],
    *,
    catalogue: Catalogue,
    answers: Mapping[str, Answer] | None = None,
) -> Recording:
    """The recording with the verdict of each of `probes` computed from its cassette.

    After a live run, `answers` says for every probe sent how it went, and the verdicts come in the
    order sent. Offline (`answers` None), a probe with a cassette is graded again with the time it
    took when recorded; one without (unanswered when recorded, or new in the catalogue) keeps what
    the recording says, or stays absent.
    """
    preset = preset_of(recording)
    spoken = dialects_of(recording, catalogue)
    if answers is not None:
        graded = tuple(
            _grade_probe(probe, recording, catalogue, preset, answers[probe.id], spoken) for probe in probes
        )
        return replace(recording.with_probes(graded), graded_with=sdk_versions())
    wanted = {probe.id: probe for probe in probes if recording.has_cassette(probe.id)}
    merged = []
    for old in recording.probes:
        probe = wanted.get(old.id)
        merged.append(
            old
            if probe is None
            else _grade_probe(probe, recording, catalogue, preset, Answer(old.elapsed_s), spoken)
        )
    return replace(recording.with_probes(tuple(merged)), graded_with=sdk_versions())


#: The SDKs whose types a grade can rest on: the openai SDK's `Decision` grades the Decisions route.
SDKS = ("openai", "anthropic", "typesafe-sdk")


def sdk_versions() -> dict[str, str]:
    """The installed version of each SDK in `SDKS` (one not installed is left out)."""
    found = {}
    for name in SDKS:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


def dialects_of(recording: Recording, catalogue: Catalogue) -> dict[str, str]:
    """Route -> the body the server speaks there, from the route's dialect probe's cassette (a route
    whose probe the recording does not hold, or whose probe found none, is read as written)."""
    known = {p.id for p in catalogue.probes}
    spoken: dict[str, str] = {}
    for surface, probe_id in dialects.PROBES.items():
        if probe_id not in known or not recording.has_cassette(probe_id):
            continue
        try:
            found = dialects.found_in(surface, load_exchanges(recording.cassette(probe_id)))
        except CassetteError:
            continue
        if found.dialect is not None:
            spoken[surface] = found.dialect
    return spoken


def _grade_probe(
    probe: Probe,
    recording: Recording,
    catalogue: Catalogue,
    preset: Preset,
    answer: Answer,
    spoken: Mapping[str, str],
) -> ProbeResult:
    if answer.failure is not None:
        return _result(probe, None, answer.failure, answer.elapsed_s, recording.server)
    status: int | None = None
    try:
        exchanges = load_exchanges(recording.cassette(probe.id))
        status = exchanges[-1].status if exchanges else None
        if _stale(requests_for(probe, catalogue, preset), exchanges, preset):
            return _result(probe, None, Verdict("fault", STALE, ""), answer.elapsed_s, recording.server)
        verdict = classify(probe, exchanges, spoken.get(probe.surface))
        return _result(probe, status, verdict, answer.elapsed_s, recording.server)
    except Exception as exc:  # one probe's grading failure is that probe's verdict, nothing more
        ungraded = Verdict(
            "ungraded",
            f"ungraded: {type(exc).__name__}: {exc}",
            "the cassette is kept; mend the classifier and run `python -m jevper.probe replay`",
        )
        return _result(probe, status, ungraded, answer.elapsed_s, recording.server)


def _result(
    probe: Probe, status: int | None, verdict: Verdict, elapsed: float | None, server: str
) -> ProbeResult:
    result = ProbeResult(
        id=probe.id,
        surface=probe.surface,
        topic=probe.topic,
        status=status,
        outcome=verdict.outcome,
        verdict=verdict.text,
        evidence=verdict.evidence,
        elapsed_s=elapsed,
        grade=verdict.grade,
        stability=dict(verdict.stability) if verdict.stability is not None else None,
        confidence=dict(verdict.facts["confidence"]) if "confidence" in verdict.facts else None,
    )
    if verdict.outcome == "ungraded":
        return result
    return annotate(result, server, verdict.facts)


def _stale(expected: Sequence[ProbeRequest], exchanges: Sequence[Exchange], preset: Preset) -> bool:
    """The cassette does not hold the requests the probe sends today (method, path, body), in order."""
    if len(expected) != len(exchanges):
        return True
    root = urlsplit(preset.base_url).path.rstrip("/")
    for request, exchange in zip(expected, exchanges, strict=True):
        path = f"{root}/{request.path.lstrip('/')}"
        if (request.method, path) != (exchange.method, exchange.path):
            return True
        if _body(request) != _recorded_body(exchange):
            return True
    return False


def _body(request: ProbeRequest) -> Any:
    if request.json_body is not None:
        return request.json_body
    text = request.content.decode("utf-8", "replace")
    return _parsed(text) if text else None


def _recorded_body(exchange: Exchange) -> Any:
    body = exchange.request_body
    return _parsed(body) if isinstance(body, str) else body


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
