"""The probe catalogue: declarative requests loaded from the TOML files of `jevper.probes`.

A probe is data. How its request is composed lives in `compose.py`; how its answer becomes a verdict
lives in `classifiers.py`, under the name the probe gives. The canonical probes (`canonical = true`)
are the contract every server is recorded against; a probe added since is shown as "not recorded"
for a recording made before it. Every name a probe gives (classifier, agreement rule, prompt
layout, topic) is checked when the catalogue loads.
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, cast

from jevper._wire import SURFACES, Surface
from jevper.probe.agreement import RULES

#: The probe files, in the order the runner sends them (the catalogue's order).
PROBE_FILES = ("chat.toml", "responses.toml", "messages.toml", "systemone.toml")
#: The other data files of the package, which hold no probes.
DATA_FILES = ("presets.toml", "topics.toml", "reference.toml")

_PROBE_KEYS = {
    "id",
    "topic",
    "asks",
    "decides",
    "classifier",
    "deterministic",
    "path",
    "method",
    "prompt",
    "thinking_off",
    "model",
    "body",
    "drop",
    "raw_body",
    "prime_with",
    "request_of",
    "sampling",
    "opening",
    "compare",
    "canonical",
    "reproducible",
}


class CatalogueError(ValueError):
    """A catalogue file does not say what a probe needs; the message names the file and the field."""


@dataclass(frozen=True)
class Probe:
    """One canonical request and the name of the classifier that turns its answer into a verdict."""

    id: str
    surface: Surface
    topic: str
    method: str
    path: str  # relative to the base URL, which ends in /v1
    asks: str
    decides: str
    classifier: str
    deterministic: bool  # the verdict does not depend on what the model chose to say
    prompt: str = "standard"
    thinking_off: bool = True
    model: str | None = None  # a literal model id instead of the preset's
    body: Mapping[str, Any] = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    raw_body: str | None = None  # sent as-is instead of a composed JSON body
    prime_with: str | None = None  # send this probe's request first, in the same cassette
    request_of: str | None = None  # send that probe's request instead of composing one
    # Overrides of the reproducible fields (temperature, seed) for a probe whose question needs
    # sampling, e.g. n: 2, which a server may refuse under greedy decoding.
    sampling: Mapping[str, Any] = field(default_factory=dict)
    opening: str | None = None  # the prompt's first line, unique to a cold-cache probe
    compare: str = "outcome"  # the agreement rule (agreement.RULES) that compares it with the reference
    canonical: bool = False  # one of the canonical probes every recording is made against
    # Send temperature 0 and the fixed seed; false for an API without those fields (System One).
    reproducible: bool = True


@dataclass(frozen=True)
class Topic:
    id: str
    title: str


@dataclass(frozen=True)
class Catalogue:
    probes: tuple[Probe, ...]
    topics: tuple[Topic, ...]

    def __len__(self) -> int:
        return len(self.probes)

    @property
    def canonical(self) -> tuple[Probe, ...]:
        return tuple(p for p in self.probes if p.canonical)

    def get(self, probe_id: str) -> Probe:
        for probe in self.probes:
            if probe.id == probe_id:
                return probe
        raise KeyError(f"no probe named {probe_id!r}; `python -m jevper.probe --list` shows the ids")

    def select(self, patterns: Sequence[str] | None) -> tuple[Probe, ...]:
        """The probes whose id matches any glob, in catalogue order (all of them for no pattern)."""
        if not patterns:
            return self.probes
        return tuple(p for p in self.probes if any(fnmatch.fnmatchcase(p.id, g) for g in patterns))

    def topic(self, topic_id: str) -> Topic:
        for topic in self.topics:
            if topic.id == topic_id:
                return topic
        raise KeyError(topic_id)


def read_data(name: str) -> dict[str, Any]:
    """Parse one TOML file shipped in `jevper.probes`."""
    text = resources.files("jevper.probes").joinpath(name).read_text(encoding="utf-8")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"probes/{name} is not valid TOML: {exc}") from exc


def _probe(raw: Mapping[str, Any], defaults: Mapping[str, Any], source: str) -> Probe:
    unknown = set(raw) - _PROBE_KEYS
    if unknown:
        raise CatalogueError(f"probes/{source}: probe {raw.get('id')!r} has unknown keys {sorted(unknown)}")
    for key in ("id", "topic", "asks", "decides", "classifier", "compare", "deterministic"):
        if key not in raw:
            raise CatalogueError(f"probes/{source}: probe {raw.get('id')!r} needs {key!r}")
    surface = defaults.get("surface")
    if surface not in SURFACES:
        raise CatalogueError(f"probes/{source}: expected surface one of {SURFACES}, got {surface!r}")
    return Probe(
        id=raw["id"],
        surface=cast(Surface, surface),
        topic=raw["topic"],
        method=raw.get("method", "POST"),
        path=raw.get("path", defaults.get("path", "")),
        asks=raw["asks"],
        decides=raw["decides"],
        classifier=raw["classifier"],
        deterministic=bool(raw["deterministic"]),
        prompt=raw.get("prompt", defaults.get("prompt", "standard")),
        thinking_off=bool(raw.get("thinking_off", defaults.get("thinking_off", True))),
        model=raw.get("model"),
        body=dict(raw.get("body", {})),
        drop=tuple(raw.get("drop", ())),
        raw_body=raw.get("raw_body"),
        prime_with=raw.get("prime_with"),
        request_of=raw.get("request_of"),
        sampling=dict(raw.get("sampling", {})),
        opening=raw.get("opening"),
        compare=raw["compare"],
        canonical=bool(raw.get("canonical", defaults.get("canonical", False))),
        reproducible=bool(raw.get("reproducible", defaults.get("reproducible", True))),
    )


@cache
def load_catalogue() -> Catalogue:
    """Every probe in catalogue order, with the topics their matrices are drawn in; checked whole."""
    probes: list[Probe] = []
    for name in PROBE_FILES:
        data = read_data(name)
        defaults = {k: v for k, v in data.items() if k != "probe"}
        probes.extend(_probe(raw, defaults, name) for raw in data.get("probe", []))
    topics = tuple(Topic(id=t["id"], title=t["title"]) for t in read_data("topics.toml")["topic"])
    check_catalogue(probes, topics)
    return Catalogue(probes=tuple(probes), topics=topics)


def check_catalogue(probes: Sequence[Probe], topics: Sequence[Topic]) -> None:
    """Unique ids; every classifier, agreement rule, prompt layout and topic a probe names exists;
    sampling overrides of reproducible fields only; references to earlier probes."""
    # Imported here: both modules read probes, so they load after this one.
    from jevper.probe.classifiers import CLASSIFIERS
    from jevper.probe.prompts import PROMPTS

    ids = [p.id for p in probes]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise CatalogueError(f"probe ids must be unique; repeated: {duplicates}")
    topic_ids = {t.id for t in topics}
    reproducible = set(read_data("presets.toml")["reproducible"])
    for index, probe in enumerate(probes):
        if probe.classifier not in CLASSIFIERS:
            raise CatalogueError(
                f"{probe.id}: classifier must name one in jevper/probe/classifiers.py among "
                f"{sorted(CLASSIFIERS)}, got {probe.classifier!r}"
            )
        if probe.prompt not in PROMPTS:
            raise CatalogueError(f"{probe.id}: prompt must be a layout among {PROMPTS}, got {probe.prompt!r}")
        if probe.compare not in RULES:
            raise CatalogueError(
                f"{probe.id}: compare must name a rule among {sorted(RULES)}, got {probe.compare!r}"
            )
        if not set(probe.sampling) <= reproducible:
            raise CatalogueError(
                f"{probe.id}: sampling may override only {sorted(reproducible)}, "
                f"got {sorted(set(probe.sampling) - reproducible)}"
            )
        if probe.topic not in topic_ids:
            raise CatalogueError(f"{probe.id}: topic {probe.topic!r} is not one of {sorted(topic_ids)}")
        for ref in (probe.prime_with, probe.request_of):
            # A referenced request must come earlier, so a full run sends it first anyway.
            if ref is not None and ref not in ids[:index]:
                raise CatalogueError(f"{probe.id}: refers to {ref!r}, which is not an earlier probe")
