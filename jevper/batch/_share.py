"""What the engine adapters share: each server's slots split between the workers that ask it at once."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from jevper._upstreams import Upstream
from jevper.batch._core import ServerSpec, as_server


def shared(servers: Sequence[ServerSpec], workers: int) -> list[Upstream]:
    """Each server with its slots split between ``workers`` (Ray actors, Spark tasks; at least one
    each), so that every worker's own pool together keeps to the server's limit."""
    specs = [as_server(s) for s in servers]
    return [replace(s, slots=max(1, math.ceil(s.slots / workers))) for s in specs]
