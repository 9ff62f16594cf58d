"""Token usage summed over every request of one call, from whichever path each response used."""

from __future__ import annotations

from collections.abc import Iterable

from jevper._wire import WireResult
from jevper.models import Usage


def total(results: Iterable[WireResult]) -> Usage:
    """The sums, each None when no response reported that count; one pass over the responses."""
    prompt: int | None = None
    completion: int | None = None
    cached: int | None = None
    requests = 0
    for result in results:
        requests += 1
        usage = result.usage
        if usage.prompt_tokens is not None:
            prompt = usage.prompt_tokens + (prompt or 0)
        if usage.completion_tokens is not None:
            completion = usage.completion_tokens + (completion or 0)
        if usage.cached_tokens is not None:
            cached = usage.cached_tokens + (cached or 0)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached, requests=requests)
