"""Mutated recorded bodies of every surface fed to the wire readers and to the client's readout: only
JevperError escapes, what is read is never a logprob that is not one, and any distribution that comes
out is finite, non-negative, over exactly the options and sums to 1.

The corpus is every 200 body recorded from a surface route: the harness's provider cassettes and the
client's fixtures. `scripts/test --fuzz` raises the example count (JEVPER_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from jevper import Choice, JevperError, Noul, Score, SystemOneClient
from jevper._ask import structured_schema
from jevper._wire import PROMPT_SURFACES, read
from jevper.probe.cassettes import load_exchanges
from jevper.questions import Question
from jevper.testing.bodies import Answer
from jevper.testing.faults import route
from jevper.testing.mutations import mutated_bodies

FIXTURES = Path(__file__).parents[1] / "fixtures"
FUZZ_EXAMPLES = int(os.environ.get("JEVPER_FUZZ_EXAMPLES") or 200)
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def _cassette_bodies(path: Path) -> Iterator[tuple[str, int, Any]]:
    """(uri, status, body text) of each exchange of a vcrpy cassette."""
    for recorded in load_exchanges(path):
        yield recorded.uri, recorded.status, recorded.text


@functools.cache
def recorded_bodies() -> list[tuple[str, str, dict[str, Any]]]:
    """(source, surface, body) of every 200 JSON body recorded from a surface route (read when a test first
    asks: reading every cassette cost each of the offline suite's workers a quarter second while
    collecting)."""
    found: list[tuple[str, str, dict[str, Any]]] = []

    def keep(source: str, uri: str, status: int, text: Any) -> None:
        surface = route(uri.split("?")[0])
        try:
            body = json.loads(text) if isinstance(text, str) else text
        except ValueError:
            return
        if surface in PROMPT_SURFACES and status == 200 and isinstance(body, dict):
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


def test_the_corpus_holds_recorded_bodies_of_every_surface() -> None:
    assert {surface for _, surface, _ in recorded_bodies()} == set(PROMPT_SURFACES)
    assert len(recorded_bodies()) >= 40


def test_every_recorded_body_reads_or_is_refused_with_a_jevper_error() -> None:
    read_ok = 0
    for source, surface, body in recorded_bodies():
        try:
            read(surface, body)  # type: ignore[arg-type]
            read_ok += 1
        except JevperError:
            pass
        except Exception as exc:  # pragma: no cover - the failure message is the point
            raise AssertionError(f"{source}: {type(exc).__name__}: {exc}") from exc
    assert read_ok >= len(recorded_bodies()) // 2


@FUZZ
@given(st.deferred(lambda: mutated_bodies(recorded_bodies())))
def test_a_mutated_body_is_read_or_refused_with_a_jevper_error(case: tuple[str, str, Any]) -> None:
    _, surface, body = case
    try:
        result = read(surface, body)  # type: ignore[arg-type]
    except JevperError as error:
        event(f"{surface}: {type(error).__name__}")
        return
    event(f"{surface}: read")
    for token in result.logprobs or ():
        assert math.isfinite(token.logprob) and token.logprob <= 0
        assert all(math.isfinite(lp) and lp <= 0 for _, lp in token.top)
    assert result.text is None or isinstance(result.text, str)
    assert result.reasoning is None or isinstance(result.reasoning, str)


# --- the client's readout -------------------------------------------------------------------------------

QUESTIONS: tuple[Question, ...] = (
    Choice(criteria={"billing": "money, invoices", "technical": "errors, crashes", "sales": "pricing"}),
    Noul(instructions="Is the customer asking for money back?"),
    Score(criteria=["calm", "annoyed", "furious"]),
)
METHODS = {"chat_completions": ("logprobs", "structured"), "responses": ("logprobs", "structured")}


def healthy_bodies() -> list[tuple[str, str, dict[str, Any]]]:
    """The fault server's healthy answer per surface and question: a label distribution, a JSON answer."""
    bodies = []
    for surface in PROMPT_SURFACES:
        bodies.append(
            ("healthy label", surface, Answer(surface, {"logprobs": True, "top_logprobs": 5}, "m").body())
        )  # type: ignore[arg-type]
        for question in QUESTIONS:
            schema = {"schema": structured_schema(question)}
            bodies.append(
                (f"healthy {type(question).__name__}", surface, Answer(surface, schema, "m").body())
            )  # type: ignore[arg-type]
    return bodies


def seeds() -> list[tuple[str, str, dict[str, Any]]]:
    """The recorded bodies and the healthy answers, which weigh eight times a recorded body, so more
    mutants still carry a readable answer."""
    return recorded_bodies() + healthy_bodies() * 8


class Canned:
    """A client whose every create() returns the same parsed body, whatever was asked."""

    def __init__(self, body: Any) -> None:
        def create(**_: Any) -> Any:
            return copy.deepcopy(body)

        self.chat = SimpleNamespace(completions=SimpleNamespace(create=create))
        self.responses = SimpleNamespace(create=create)
        self.messages = SimpleNamespace(create=create)


def ask(body: Any, surface: str, method: str, question: Question) -> Any:
    client = SystemOneClient(Canned(body), model="m", api=surface, method=method)
    return client.system_one(state="I was charged twice.", questions={"q": question}).answers["q"]


def assert_a_distribution(answer: Any, question: Question) -> None:
    expected = set(range(len(question.options))) if isinstance(question, Score) else set(question.options)
    probabilities = answer.probabilities
    assert set(probabilities) == expected
    assert all(isinstance(p, float) and math.isfinite(p) and p >= 0 for p in probabilities.values())
    assert math.isclose(sum(probabilities.values()), 1.0, rel_tol=1e-9, abs_tol=1e-12)
    assert 0.0 <= answer.confidence <= 1.0


def test_the_healthy_seeds_answer_every_question_with_a_real_distribution() -> None:
    answered = 0
    for _, surface, body in healthy_bodies():
        for method in METHODS.get(surface, ("structured",)):
            for question in QUESTIONS:
                try:
                    answer = ask(body, surface, method, question)
                except JevperError:
                    continue
                assert_a_distribution(answer, question)
                answered += 1
    assert answered >= 3 * len(QUESTIONS)


def _asked(source: str, surface: str, data: st.DataObject) -> tuple[str, Question]:
    """The method and question a seed answers (a healthy one answers its own), else any."""
    for question in QUESTIONS:
        if source == f"healthy {type(question).__name__}":
            return "structured", question
    question = data.draw(st.sampled_from(QUESTIONS))
    if source == "healthy label" and surface != "messages":
        return "logprobs", question
    return data.draw(st.sampled_from(METHODS.get(surface, ("structured",)))), question


@FUZZ
@given(st.deferred(lambda: mutated_bodies(seeds())), st.data())
def test_a_mutated_body_answers_with_a_real_distribution_or_a_jevper_error(
    case: tuple[str, str, Any], data: st.DataObject
) -> None:
    source, surface, body = case
    method, question = _asked(source, surface, data)
    try:
        answer = ask(body, surface, method, question)
    except JevperError as error:
        event(f"{surface} {method}: {type(error).__name__}")
        return
    event(f"{surface} {method}: answered")
    assert_a_distribution(answer, question)
