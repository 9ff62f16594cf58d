"""``GET /models``: whether the server marks a model as a decision model, which System One serves.

llama.cpp (b11361 and later) lists ``architecture.output_modalities`` per model, with ``"decisions"`` for
a native decision model; servers from before decision models leave ``architecture`` out. Values this
reader does not know are tolerated: only the membership of ``"decisions"`` counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

ROUTE: Final = "models"
DECISIONS: Final = "decisions"


@dataclass(frozen=True)
class Listing:
    """What the model list says about one model: ``decisions`` and why, in words for ``debug``."""

    decisions: bool
    why: str
    #: The list names the model, and whether it says the model's outputs (llama.cpp's
    #: ``architecture.output_modalities``), so that the list alone decides; named without them, another
    #: route may (Ollama's POST /api/show).
    listed: bool = False
    says_outputs: bool = False


def decision_model(body: object, model: str) -> Listing:
    """Read a ``GET /models`` body for ``model``, listed by its id or one of its aliases."""
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list):
        return Listing(False, "GET /models answered without a 'data' list of models")
    entries = [entry for entry in data if isinstance(entry, Mapping)]
    entry = next((e for e in entries if model in (e.get("id"), *_aliases(e))), None)
    if entry is None:
        listed = [e.get("id") for e in entries][:5]
        return Listing(False, f"GET /models does not list {model!r} (it lists {listed!r})")
    architecture = entry.get("architecture")
    if architecture is None:
        return Listing(
            False,
            f"GET /models lists {model!r} without an architecture (a server from before decision models)",
            listed=True,
        )
    outputs = architecture.get("output_modalities") if isinstance(architecture, Mapping) else None
    if not isinstance(outputs, list):
        return Listing(
            False, f"GET /models lists {model!r} without architecture.output_modalities", listed=True
        )
    shown = [o for o in outputs if isinstance(o, str)][:8]
    if DECISIONS in outputs:
        return Listing(
            True,
            f"GET /models lists {model!r} with output_modalities {shown!r}: a decision model",
            listed=True,
            says_outputs=True,
        )
    return Listing(
        False,
        f"GET /models lists {model!r} with output_modalities {shown!r}: not a decision model",
        listed=True,
        says_outputs=True,
    )


def _aliases(entry: Mapping[str, object]) -> tuple[object, ...]:
    aliases = entry.get("aliases")
    return tuple(aliases) if isinstance(aliases, list) else ()
