"""Server presets: default base URL, default model id and the thinking-off field per surface."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any

from jevper.probe.catalogue import SURFACES, CatalogueError, Surface, read_data


@dataclass(frozen=True)
class Preset:
    name: str
    base_url: str  # ends in /v1
    model: str
    thinking_off: Mapping[Surface, Mapping[str, Any]]

    def with_overrides(self, *, base_url: str | None = None, model: str | None = None) -> Preset:
        return Preset(
            name=self.name,
            base_url=(base_url or self.base_url).rstrip("/"),
            model=model or self.model,
            thinking_off=self.thinking_off,
        )


@cache
def load_presets() -> Mapping[str, Preset]:
    data = read_data("presets.toml")
    presets: dict[str, Preset] = {}
    for name, raw in data["preset"].items():
        fields = raw.get("thinking_off", {})
        missing = [s for s in SURFACES if s not in fields]
        if missing:
            raise CatalogueError(f"probes/presets.toml: preset {name!r} has no thinking_off for {missing}")
        presets[name] = Preset(
            name=name,
            base_url=raw["base_url"],
            model=raw["model"],
            thinking_off=MappingProxyType({s: dict(fields[s]) for s in SURFACES}),
        )
    return MappingProxyType(presets)


def get_preset(name: str) -> Preset:
    presets = load_presets()
    if name not in presets:
        raise CatalogueError(f"expected a server preset among {sorted(presets)}, got {name!r}")
    return presets[name]


@cache
def reproducible_fields() -> Mapping[str, Any]:
    """temperature 0 and a fixed seed, sent with every request so a recording can be repeated."""
    return MappingProxyType(dict(read_data("presets.toml")["reproducible"]))
