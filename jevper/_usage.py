"""Token usage summed over every request of one call, from whichever path each response used."""

from __future__ import annotations

from collections.abc import Iterable

from jevper._wire import WireResult
from jevper.models import Usage


def _sum(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def total(results: Iterable[WireResult]) -> Usage:
    results = list(results)
    return Usage(
        prompt_tokens=_sum(r.usage.prompt_tokens for r in results),
        completion_tokens=_sum(r.usage.completion_tokens for r in results),
        cached_tokens=_sum(r.usage.cached_tokens for r in results),
        requests=len(results),
    )
