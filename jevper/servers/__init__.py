"""Servers started on loopback for the harness, the gateway, the tests and the benchmarks: one module
per kind, on one process lifecycle (`process`).

A kind's preset (probes/presets.toml) names its spawner module; the module exposes ``SPAWNER``, which
adds the kind's own command-line options and starts the server. Everything else about a kind is
data in its preset.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
from typing import Protocol

from jevper.servers.process import SpawnedServer, SpawnError

__all__ = ["SpawnError", "SpawnedServer", "Spawner", "load_spawner"]


class Spawner(Protocol):
    kind: str  # the preset it starts
    #: The releases ``--release`` may choose on ``--spawn``, the first the default; none: the kind starts
    #: the release installed, which ``--release`` may only name.
    releases: tuple[str, ...]

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        """The kind's own options of `record --spawn`."""

    def start(
        self, options: argparse.Namespace, api_key: str | None
    ) -> contextlib.AbstractContextManager[SpawnedServer]:
        """Start the server (on a free loopback port) for as long as the context lasts."""


def load_spawner(module: str, kind: str) -> Spawner:
    """The SPAWNER of `module`, which must start servers of `kind`."""
    try:
        spawner: Spawner = importlib.import_module(module).SPAWNER
    except (ImportError, AttributeError) as exc:
        raise SpawnError(f"expected a module {module} with a SPAWNER for {kind!r}: {exc}") from exc
    if spawner.kind != kind:
        raise SpawnError(f"{module}.SPAWNER starts {spawner.kind!r} servers, not {kind!r}")
    return spawner
