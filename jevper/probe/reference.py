"""The reference document's measurements, transcribed per probe (probes/reference.toml).

They serve twice: as the `reference` each recorded verdict is compared with, and as transcribed
columns in the matrices — marked as transcribed, with no cassettes behind them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from jevper.probe.catalogue import CatalogueError, load_catalogue, read_data
from jevper.probe.results import OUTCOMES, Outcome, ProbeResult, Recording

TRANSCRIBED_FROM = "transcribed from the reference document"


@dataclass(frozen=True)
class ReferenceEntry:
    outcome: Outcome
    says: str
    match: str | None = None  # a phrase a recorded verdict must contain to agree

    def agrees(self, result: ProbeResult) -> bool | None:
        if result.outcome in ("fault", "timeout", "not-run"):
            return None
        if result.outcome != self.outcome:
            return False
        return self.match is None or self.match in result.verdict


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
    ids = {p.id for p in load_catalogue().probes}
    servers: dict[str, ReferenceServer] = {}
    for name, raw in read_data("reference.toml")["server"].items():
        entries: dict[str, ReferenceEntry] = {}
        for probe_id, entry in raw["probes"].items():
            if probe_id not in ids:
                raise CatalogueError(f"probes/reference.toml: {name} names unknown probe {probe_id!r}")
            if entry["outcome"] not in OUTCOMES:
                raise CatalogueError(
                    f"probes/reference.toml: {name}/{probe_id}: expected an outcome among {OUTCOMES}, "
                    f"got {entry['outcome']!r}"
                )
            entries[probe_id] = ReferenceEntry(entry["outcome"], entry["says"], entry.get("match"))
        servers[name] = ReferenceServer(name, raw["release"], raw["model"], entries)
    return servers


def annotate(result: ProbeResult, server: str) -> ProbeResult:
    """The result with what the reference says for this server's probe, and whether they agree."""
    entry = load_reference().get(server, ReferenceServer(server, "", "", {})).probes.get(result.id)
    if entry is None:
        return ProbeResult(**{**result.__dict__, "reference": None, "agrees_with_reference": None})
    return ProbeResult(
        **{**result.__dict__, "reference": entry.says, "agrees_with_reference": entry.agrees(result)}
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
    return Recording(
        key=ref.key,
        server=ref.server,
        release=ref.release,
        model=ref.model,
        model_name=ref.model,
        provenance="transcribed",
        recorded_on="",
        command=TRANSCRIBED_FROM,
        probes=tuple(probes),
    )
