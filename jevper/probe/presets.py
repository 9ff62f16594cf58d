"""Server kinds as data (probes/presets.toml): name, base URL, model, release source, thinking switch.

A kind the harness can start also names its spawner module (see ``jevper.servers``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from types import MappingProxyType
from typing import Any

import httpx

from jevper._wire import PROMPT_SURFACES
from jevper.probe.catalogue import SURFACES, CatalogueError, ProbeSurface, read_data

#: Where a kind that names no version source is asked for its release (vLLM, ollama, llama.cpp).
USUAL_VERSION_SOURCES: tuple[tuple[str, str], ...] = (
    ("/version", "version"),
    ("/api/version", "version"),
    ("/props", "build_info"),
)
_KEYS = {"name", "base_url", "model", "version", "spawner", "thinking_off", "serves"}


@dataclass(frozen=True)
class Preset:
    name: str  # the kind's key, e.g. "llamacpp"
    display_name: str  # e.g. "llama.cpp"
    base_url: str  # ends in /v1
    model: str
    thinking_off: Mapping[str, Mapping[str, Any]]  # per prompt surface
    version_sources: tuple[tuple[str, str], ...] = USUAL_VERSION_SOURCES  # (path, key) under the root
    spawner: str | None = None  # the module with SPAWNER, for a kind `--spawn` can start
    serves: tuple[ProbeSurface, ...] = SURFACES  # a System One server serves ("systemone",) alone

    def with_overrides(self, *, base_url: str | None = None, model: str | None = None) -> Preset:
        return replace(self, base_url=(base_url or self.base_url).rstrip("/"), model=model or self.model)

    def thinking_off_for(self, surface: str) -> Mapping[str, Any]:
        return self.thinking_off.get(surface, {})

    def stated_release(self, headers: Mapping[str, str]) -> str | None:
        """The release as the server states it, or None when it names none (see `states_release`)."""
        root = self.base_url.removesuffix("/v1")
        for path, key in self.version_sources:
            try:
                answer = httpx.get(root + path, headers=dict(headers), timeout=5.0)
                value = answer.json() if answer.status_code == 200 else None
                for part in key.split("."):  # a dotted key reads a nested field
                    value = value.get(part) if isinstance(value, Mapping) else None
            except (httpx.HTTPError, ValueError):
                continue
            if isinstance(value, str) and states_release(value):
                return value.split("-")[0]
        return None


def states_release(value: str) -> bool:
    """Does a server's version string name a release? llama.cpp built without git metadata says
    "b0-unknown" (xllamacpp's wheel, any source build outside a checkout), its prebuilt binaries
    "b1-<commit>": neither names one, and two different releases would land in one recording."""
    head = value.split("-")[0]
    return bool(head) and head not in ("b0", "b1") and "unknown" not in value


@cache
def load_presets() -> Mapping[str, Preset]:
    data = read_data("presets.toml")
    presets: dict[str, Preset] = {}
    for name, raw in data["preset"].items():
        unknown = set(raw) - _KEYS
        if unknown:
            raise CatalogueError(f"probes/presets.toml: preset {name!r} has unknown keys {sorted(unknown)}")
        fields = raw.get("thinking_off", {})
        strange = [s for s in fields if s not in PROMPT_SURFACES]
        if strange:
            raise CatalogueError(
                f"probes/presets.toml: preset {name!r}: thinking_off for {strange}, expected surfaces "
                f"among {list(PROMPT_SURFACES)}"
            )
        serves = raw.get("serves", list(SURFACES))
        if not isinstance(serves, list) or not serves or any(s not in SURFACES for s in serves):
            raise CatalogueError(
                f"probes/presets.toml: preset {name!r}: expected serves to list surfaces among "
                f"{list(SURFACES)}, got {serves!r}"
            )
        sources = (
            tuple((s["path"], s["key"]) for s in raw["version"])
            if "version" in raw
            else USUAL_VERSION_SOURCES
        )
        presets[name] = Preset(
            name=name,
            display_name=raw.get("name", name),
            base_url=raw["base_url"],
            model=raw["model"],
            thinking_off=MappingProxyType({s: dict(v) for s, v in fields.items()}),
            version_sources=sources,
            spawner=raw.get("spawner"),
            serves=tuple(serves),
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
