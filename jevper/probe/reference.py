"""The reference document's measurements, transcribed per probe (probes/reference.toml).

They serve twice: as the `reference` each recorded verdict is compared with, and as transcribed
columns in the matrices — marked as transcribed, with no cassettes behind them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from jevper.probe.agreement import agrees
from jevper.probe.catalogue import CatalogueError, load_catalogue, read_data
from jevper.probe.recording import OUTCOMES, UNANSWERED, Outcome, ProbeResult, Recording, Run

TRANSCRIBED_FROM = "transcribed from the reference document"


@dataclass(frozen=True)
class ReferenceEntry:
    outcome: Outcome
    says: str
    fact: Any = None  # the value of the probe's decisive fact (its `compare` rule), when stated

    def agrees(self, result: ProbeResult, rule: str, facts: Mapping[str, Any]) -> bool | None:
        """None when the probe got no answer; else the outcome and the stated fact must both match."""
        if result.outcome in UNANSWERED:
            return None
        return agrees(rule, result.outcome, facts, self.outcome, self.fact)


@dataclass(frozen=True)
class ReferenceServer:
    server: str
    release: str
    model: str
    probes: Mapping[str, ReferenceEntry]

    @property
    def key(self) -> str:
        return f"{self.server}-{self.release}-reference"


@cache
def load_reference() -> Mapping[str, ReferenceServer]:
    rules = {p.id: p.compare for p in load_catalogue().probes}
    servers: dict[str, ReferenceServer] = {}
    for name, raw in read_data("reference.toml")["server"].items():
        entries: dict[str, ReferenceEntry] = {}
        for probe_id, entry in raw["probes"].items():
            if probe_id not in rules:
                raise CatalogueError(f"probes/reference.toml: {name} names unknown probe {probe_id!r}")
            if "fact" in entry and rules[probe_id] == "outcome":
                raise CatalogueError(
                    f"probes/reference.toml: {name}/{probe_id} states a fact, but the probe compares "
                    "the outcome alone (set its `compare` rule in the catalogue, or drop the fact)"
                )
            if entry["outcome"] not in OUTCOMES:
                raise CatalogueError(
                    f"probes/reference.toml: {name}/{probe_id}: expected an outcome among {OUTCOMES}, "
                    f"got {entry['outcome']!r}"
                )
            entries[probe_id] = ReferenceEntry(entry["outcome"], entry["says"], entry.get("fact"))
        servers[name] = ReferenceServer(name, raw["release"], raw["model"], entries)
    return servers


def annotate(result: ProbeResult, server: str, facts: Mapping[str, Any]) -> ProbeResult:
    """The result with what the reference says for this server's probe, and whether they agree on
    the probe's decisive fact (`facts` are the classifier's, keyed by agreement rule)."""
    entry = load_reference().get(server, ReferenceServer(server, "", "", {})).probes.get(result.id)
    if entry is None:
        return ProbeResult(**{**result.__dict__, "reference": None, "agrees_with_reference": None})
    rule = load_catalogue().get(result.id).compare
    return ProbeResult(
        **{
            **result.__dict__,
            "reference": entry.says,
            "agrees_with_reference": entry.agrees(result, rule, facts),
        }
    )


def transcribed_recording(ref: ReferenceServer) -> Recording:
    """A column built from the reference alone; probes it does not cover are `not-run`."""
    probes = []
    for probe in load_catalogue().probes:
        entry = ref.probes.get(probe.id)
        probes.append(
            ProbeResult(
                id=probe.id,
                surface=probe.surface,
                topic=probe.topic,
                status=None,
                outcome=entry.outcome if entry else "not-run",
                verdict=entry.says if entry else "not covered by the reference document",
                evidence="",
                elapsed_s=None,
                reference=entry.says if entry else None,
                agrees_with_reference=None,
            )
        )
    told = Run(
        server=ref.server,
        release=ref.release,
        model=ref.model,
        model_name=ref.model,
        recorded_on="",
        command=TRANSCRIBED_FROM,
    )
    return Recording(ref.key, told, tuple(probes), provenance="transcribed", how=TRANSCRIBED_FROM)
