"""Turn a probe into the HTTP request(s) it sends, for one preset and model.

Body order: model, the prompt's fields, the reproducible fields (temperature 0, a fixed seed, with the
probe's `sampling` overrides; unless the probe asks for none), the preset's thinking-off field (unless
the probe turns it off), then the probe's own body; `drop` last. A GET sends no body.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from jevper.probe import stability
from jevper.probe.catalogue import Catalogue, Probe
from jevper.probe.presets import Preset, reproducible_fields
from jevper.probe.prompts import ROTATIONS, prompt_fields


@dataclass(frozen=True)
class ProbeRequest:
    method: str
    path: str  # relative to the base URL
    content: bytes  # the exact bytes sent
    json_body: Any  # the parsed body, None when the probe sends bytes that are not JSON
    # Requests next to each other with the same wave are sent together, each on its own connection (a
    # load probe's request among others); None: alone, after the one before has its answer.
    wave: int | None = None

    def describe(self) -> str:
        shown = (
            json.dumps(self.json_body, indent=2, ensure_ascii=False)
            if self.json_body is not None
            else self.content.decode("utf-8", "replace")
        )
        return f"{self.method} {self.path}\n{shown}"


def encode(body: Any) -> bytes:
    """One canonical JSON encoding, so a replay sends exactly the bytes that were recorded."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def compose(probe: Probe, catalogue: Catalogue, preset: Preset) -> ProbeRequest:
    """The probe's own request (the one its verdict reads; of a probe that sends several, its first)."""
    if probe.sends:
        return compose(replace(probe, prompt=probe.sends[0], sends=()), catalogue, preset)
    if probe.request_of is not None:
        return compose(catalogue.get(probe.request_of), catalogue, preset)
    if probe.raw_body is not None:
        return ProbeRequest(probe.method, probe.path, probe.raw_body.encode("utf-8"), None)
    if probe.method == "GET":
        return ProbeRequest(probe.method, probe.path, b"", None)
    body: dict[str, Any] = {"model": probe.model or preset.model}
    body.update(prompt_fields(probe.prompt, probe.surface, probe.opening))
    if probe.reproducible:
        body.update(reproducible_fields())
        body.update(probe.sampling)
    if probe.thinking_off:
        body.update(preset.thinking_off_for(probe.surface))
    body.update(probe.body)
    for key in probe.drop:
        body.pop(key, None)
    return ProbeRequest(probe.method, probe.path, encode(body), body)


def requests_for(probe: Probe, catalogue: Catalogue, preset: Preset) -> tuple[ProbeRequest, ...]:
    """Every request the probe sends, in order: its primer (if any), then its own; a stability probe's
    plan (stability.KINDS); one per body a dialect probe `sends`."""
    if probe.sends:
        return tuple(
            compose(replace(probe, prompt=layout, sends=()), catalogue, preset) for layout in probe.sends
        )
    own = compose(probe, catalogue, preset)
    if probe.stability is not None:
        return _plan(probe, own, catalogue, preset)
    if probe.prime_with is None:
        return (own,)
    return (compose(catalogue.get(probe.prime_with), catalogue, preset), own)


def _plan(probe: Probe, own: ProbeRequest, catalogue: Catalogue, preset: Preset) -> tuple[ProbeRequest, ...]:
    settings = stability.settings()
    if probe.stability == "repeat":
        return (own,) * settings.repeats
    if probe.stability == "cache":
        return (own,) * 3
    if probe.stability == "load":
        others = (
            compose(
                replace(probe, opening=f"Another customer's ticket, {i} of {settings.load}."),
                catalogue,
                preset,
            )
            for i in range(1, settings.load + 1)
        )
        return (own,) * 3 + tuple(replace(r, wave=1) for r in (own, *others))
    if probe.stability == "variant":
        assert probe.variant is not None  # the catalogue checks it
        variant = compose(replace(probe, prompt=probe.variant), catalogue, preset)
        return (own, variant, own, own, variant)
    if probe.stability == "option-order":
        return tuple(compose(replace(probe, prompt=layout), catalogue, preset) for layout in ROTATIONS)
    raise ValueError(f"expected a stability plan among {sorted(stability.KINDS)}, got {probe.stability!r}")
