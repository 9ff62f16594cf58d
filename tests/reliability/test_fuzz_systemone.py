"""Mutated System One bodies, recorded and healthy, fed to the reader and to the client: only JevperError
escapes, and any answer that comes out is a distribution over exactly the options that sums to 1.

`scripts/test --fuzz` raises the example count (JEVPER_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings

from jevper import Choice, JevperError, Noul, Score, SystemOneClient
from jevper._native import question_body
from jevper._wire import systemone
from jevper.testing.mutations import mutated_bodies
from jevper.testing.systemone import SystemOneAnswer

RECORDED = Path(__file__).parents[1] / "fixtures" / "client" / "systemone"
FUZZ = settings(
    max_examples=int(os.environ.get("JEVPER_FUZZ_EXAMPLES") or 200),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
#: The questions of the recorded request, which the healthy bodies answer too.
QUESTIONS = {
    "topic": Choice(
        criteria={"billing": "payments, charges, invoices, refunds", "shipping": None, "technical": "bugs"},
        instructions="What is the message about?",
    ),
    "refund": Noul(
        "Does the customer want money back?", {"true": "asks for a refund", "false": "asks for nothing"}
    ),
    "urgency": Score(["not urgent", "somewhat urgent", "very urgent"], instructions="How urgent is this?"),
}
ASKED = {qid: question_body(q) for qid, q in QUESTIONS.items()}


def corpus() -> list[tuple[str, str, Any]]:
    recorded = json.loads((RECORDED / "callo_valid.json").read_text())
    healthy = SystemOneAnswer({"questions": ASKED}, "m").body()
    return [("callo_valid", "systemone", json.loads(recorded["body"])), ("healthy", "systemone", healthy)]


CORPUS = corpus()


def test_the_seeds_read_as_they_are() -> None:
    for _, _, body in CORPUS:
        assert systemone.body_violations(body, ASKED) == []
        systemone.read(body, ASKED)


@FUZZ
@given(mutated_bodies(CORPUS))
def test_a_mutated_body_is_read_or_refused_with_a_jevper_error(case: tuple[str, str, Any]) -> None:
    _, _, body = case
    try:
        result = systemone.read(body, ASKED)
    except JevperError as error:
        event(type(error).__name__)
        return
    event("read")
    assert list(result.answers) == list(ASKED)


class Canned:
    """A client whose generic post() hands back the same parsed body, whatever was asked."""

    def __init__(self, body: Any) -> None:
        self.body = body

    def post(self, **_: Any) -> Any:
        return copy.deepcopy(self.body)


@FUZZ
@given(mutated_bodies(CORPUS))
def test_a_mutated_body_answers_with_real_distributions_or_a_jevper_error(case: tuple[str, str, Any]) -> None:
    _, _, body = case
    try:
        response = SystemOneClient(Canned(body), model="m", api="systemone").system_one(
            state="I was charged twice.", questions=QUESTIONS
        )
    except JevperError as error:
        event(type(error).__name__)
        return
    event("answered")
    for qid, answer in response.answers.items():
        options = QUESTIONS[qid].options
        expected = set(range(len(options))) if isinstance(QUESTIONS[qid], Score) else set(options)
        assert set(answer.probabilities) == expected
        assert all(math.isfinite(p) and 0 <= p <= 1 for p in answer.probabilities.values())
        assert math.isclose(sum(answer.probabilities.values()), 1.0, abs_tol=1e-5)
        assert 0.0 <= answer.confidence <= 1.0
