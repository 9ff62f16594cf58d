"""Mutated recorded bodies of every surface fed to the wire readers: only JevperError escapes, and what is
read is never a logprob that is not one.

The corpus is every 200 body recorded from a surface route: the harness's provider cassettes and the
client's fixtures. `scripts/test --fuzz` raises the example count (JEVPER_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings

from jevper import JevperError
from jevper._wire import SURFACES, read
from jevper.probe.recording import load_exchanges
from jevper.testing.faults import route
from jevper.testing.mutations import mutated_bodies

FIXTURES = Path(__file__).parents[1] / "fixtures"
FUZZ_EXAMPLES = int(os.environ.get("JEVPER_FUZZ_EXAMPLES") or 200)
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def _cassette_bodies(path: Path) -> Iterator[tuple[str, int, Any]]:
    """(uri, status, body text) of a vcrpy cassette in the default YAML layout."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for interaction in data.get("interactions", []):
        body = interaction["response"]["body"].get("string")
        if isinstance(body, bytes):
            body = body.decode("utf-8", "replace")
        yield interaction["request"]["uri"], interaction["response"]["status"]["code"], body


def recorded_bodies() -> list[tuple[str, str, dict[str, Any]]]:
    """(source, surface, body) of every 200 JSON body recorded from a surface route."""
    found: list[tuple[str, str, dict[str, Any]]] = []

    def keep(source: str, uri: str, status: int, text: Any) -> None:
        surface = route(uri.split("?")[0])
        try:
            body = json.loads(text) if isinstance(text, str) else text
        except ValueError:
            return
        if surface is not None and status == 200 and isinstance(body, dict):
            found.append((source, surface, body))

    for path in sorted((FIXTURES / "providers").glob("*/*.yaml")):
        for exchange in load_exchanges(path):
            keep(path.name, exchange.path, exchange.status, exchange.text)
    for path in sorted((FIXTURES / "client").glob("cassettes/*.yaml")):
        for uri, status, text in _cassette_bodies(path):
            keep(path.name, uri, status, text)
    for path in sorted((FIXTURES / "client").glob("wire/*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if "request" in data:
            keep(path.name, data["request"]["path"], data["status"], data["body"])
    return found


CORPUS = recorded_bodies()


def test_the_corpus_holds_recorded_bodies_of_every_surface() -> None:
    assert {surface for _, surface, _ in CORPUS} == set(SURFACES)
    assert len(CORPUS) >= 40


def test_every_recorded_body_reads_or_is_refused_with_a_jevper_error() -> None:
    read_ok = 0
    for source, surface, body in CORPUS:
        try:
            read(surface, body)  # type: ignore[arg-type]
            read_ok += 1
        except JevperError:
            pass
        except Exception as exc:  # pragma: no cover - the failure message is the point
            raise AssertionError(f"{source}: {type(exc).__name__}: {exc}") from exc
    assert read_ok >= len(CORPUS) // 2


@FUZZ
@given(mutated_bodies(CORPUS))
def test_a_mutated_body_is_read_or_refused_with_a_jevper_error(case: tuple[str, str, Any]) -> None:
    _, surface, body = case
    try:
        result = read(surface, body)  # type: ignore[arg-type]
    except JevperError:
        return
    for token in result.logprobs or ():
        assert math.isfinite(token.logprob) and token.logprob <= 0
        assert all(math.isfinite(lp) and lp <= 0 for _, lp in token.top)
    assert result.text is None or isinstance(result.text, str)
    assert result.reasoning is None or isinstance(result.reasoning, str)
