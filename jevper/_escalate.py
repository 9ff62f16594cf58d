"""Escalation: the questions a first server is unsure of, asked again of a second, stronger one.

The one rule, for the clients (``escalate=``: ``system_one`` and ``decisions.create``), the batch and the
gateway alike: a question whose calibrated top probability on the first server (the first client's own
calibration applied) is below the threshold is asked again of the second, the others are not. The
threshold is a number in (0, 1], or ``"auto"``: each question's guaranteed threshold in the first
client's calibration, per label where it has one (``jevper.calibration.threshold_for``; where none met
its target, every answer is below it). The top probability, not the answers' ``confidence`` (which
rescales it), is what a calibration makes mean "right this often", as ``--review-below`` compares it.

Only the escalated questions are asked again, in one call of the second client, with its own options,
calibration and cache. Each question keeps its route (``Routed``): who answered and why, and both
answers; a second call that fails keeps the first answer with the failure, typed. Nothing here sends a
request: ``unsure`` decides, the client asks, ``merged`` puts the two responses together
(``jevper.decisions.call.escalated`` a Decisions call's, by ``held`` and ``Routed``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from jevper._distribution import renormalised, top_probability
from jevper._errors import ConfigError
from jevper._usage import plus
from jevper.calibration import Calibration, threshold_for
from jevper.models import Answer, ChoiceAnswer, NoulAnswer, SystemOneResponse
from jevper.questions import Question

AUTO = "auto"
#: The threshold: a top probability in (0, 1], or "auto" (the calibration's guaranteed thresholds).
Below = float | Literal["auto"]


@dataclass(frozen=True)
class Escalation:
    """``escalate=``: the questions whose calibrated top probability is below ``below`` are asked again
    of ``to``.

    On a client, ``to`` is another client of the same kind (a ``SystemOneClient`` for a
    ``SystemOneClient``, an ``AsyncSystemOneClient`` for an ``AsyncSystemOneClient``), which asks with
    its own options, calibration and cache, in ``system_one`` and ``decisions.create`` alike (there a
    refused question is asked again too); ``calibration`` is then left out. On ``BatchClassifier``,
    ``to`` is a ``Server`` (or its mapping) and ``calibration`` (a ``Calibration`` or its file) is applied
    to that server's answers. ``below`` is a top probability in (0, 1], or ``"auto"``: each question's
    guaranteed threshold in the first client's calibration (``evaluate --fit --target-accuracy A --risk
    D``), per label where it has one.
    """

    to: Any
    below: Below
    calibration: Calibration | str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "below", checked_below(self.below))
        if self.to is None:
            raise ConfigError(
                "escalate: expected the client (or, on BatchClassifier, the server) the unsure questions are "
                "asked again of, got None; give Escalation(to=..., below=...), or leave escalate= out"
            )


def checked_below(value: object, name: str = "escalate below") -> Below:
    """A threshold as given: a number in (0, 1], or "auto"."""
    if value == AUTO:
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(
            f"{name}: expected a top probability in (0, 1] (an answer below it is asked again) or "
            f"{AUTO!r} (the calibration's guaranteed thresholds), got {value!r}"
        )
    return float(value)


def check_thresholds(below: Below, calibration: Calibration | None, qids: Sequence[str]) -> None:
    """With "auto", a calibration holding a guaranteed threshold for every question asked; refused
    (a ConfigError naming what is missing) before any request otherwise."""
    if below != AUTO:
        return
    if calibration is None:
        raise ConfigError(
            "escalate below 'auto': expected a calibration (calibration=, --calibration FILE) whose "
            "guaranteed thresholds it uses, got none; fit one with python -m jevper.evaluate ... --fit "
            "--target-accuracy A --risk D, or give a number"
        )
    for qid in qids:
        threshold_for(calibration, qid)


def top(answer: Answer) -> tuple[str, float]:
    """The answer's top option, named as a calibration names it (a yes/no answer's "true" or "false", a
    score's level index as text), and its top probability."""
    if isinstance(answer, NoulAnswer):
        return top_of(["true", "false"], [answer.noul, 1.0 - answer.noul])
    if isinstance(answer, ChoiceAnswer):
        return top_of(list(answer.probabilities), list(answer.probabilities.values()))
    return top_of([str(level) for level in answer.probabilities], list(answer.probabilities.values()))


def top_of(labels: Sequence[str], given: Sequence[float]) -> tuple[str, float]:
    """The top option of a distribution over ``labels`` (the first of a tie) and its top probability."""
    p = renormalised(given)
    best = max(range(len(p)), key=lambda i: (p[i], -i))
    return labels[best], top_probability(p)


@dataclass(frozen=True)
class Verdict:
    """One question's decision: the first answer's top probability and the threshold it was held to
    (None: no threshold met the calibration's target, so every answer is below it)."""

    confidence: float
    below: float | None

    @property
    def escalated(self) -> bool:
        return self.below is None or self.confidence < self.below


def verdict(qid: str, answer: Answer, below: Below, calibration: Calibration | None) -> Verdict:
    return held(qid, *top(answer), below, calibration)


def held(
    qid: str, label: str | None, confidence: float, below: Below, calibration: Calibration | None
) -> Verdict:
    """A top option ``label`` of top probability ``confidence`` held to the threshold (``label`` None:
    the question's own threshold under "auto", not a label's)."""
    if below != AUTO:
        return Verdict(confidence, float(below))
    if calibration is None:  # check_thresholds refuses this before any request
        raise ConfigError("escalate below 'auto': expected a calibration, got none")
    return Verdict(confidence, threshold_for(calibration, qid, label))


def unsure(below: Below, calibration: Calibration | None, response: SystemOneResponse) -> dict[str, Verdict]:
    """Every question's verdict on the first response, in its order."""
    return {qid: verdict(qid, answer, below, calibration) for qid, answer in response.answers.items()}


def asked_again(
    verdicts: Mapping[str, Verdict], questions: Sequence[tuple[str, Question]]
) -> dict[str, Question]:
    """The questions to ask the second server: the escalated ones, in the call's order."""
    return {qid: q for qid, q in questions if qid in verdicts and verdicts[qid].escalated}


class Reported(Protocol):
    """An answer as its API reports it: a ``SystemOneResponse``'s, or a Decisions call's."""

    def to_api(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Routed:
    """The route one question's answer took: who answered (``"first"`` or ``"second"``), why (its
    ``Verdict``: the first answer's top probability and the threshold), both answers, and the second
    server's failure, typed (its error's class name and message), if it failed."""

    answered_by: Literal["first", "second"]
    verdict: Verdict
    first: Reported
    second: Reported | None = None
    failure: tuple[str, str] | None = None

    def failed(self, error: Exception) -> Routed:
        """This route with the second server's failure noted: its class name and its message (any
        character the message cannot carry as UTF-8 escaped)."""
        said = str(error).encode("utf-8", "backslashreplace").decode("utf-8")
        return replace(self, failure=(type(error).__name__, said))

    def to_dict(self) -> dict[str, Any]:
        return {
            "answered_by": self.answered_by,
            "escalated": self.verdict.escalated,
            "confidence": self.verdict.confidence,
            "below": self.verdict.below,
            "first": self.first.to_api(),
            "second": None if self.second is None else self.second.to_api(),
            "failure": None
            if self.failure is None
            else {"type": self.failure[0], "message": self.failure[1]},
        }


def merged(
    response: SystemOneResponse,
    verdicts: Mapping[str, Verdict],
    second: SystemOneResponse | Exception | None,
    servers: Mapping[str, Any],
    below: Below,
) -> SystemOneResponse:
    """The first ``response`` with each escalated question answered by ``second`` (the second client's
    response, its failure, or None when none was asked), every question's route in
    ``debug["escalation"]`` and both calls' usage summed."""
    routes: dict[str, Routed] = {}
    answers = dict(response.answers)
    for qid, first in response.answers.items():
        found = verdicts[qid]
        route = Routed("first", found, first)
        if found.escalated and isinstance(second, Exception):
            route = route.failed(second)
        elif found.escalated and isinstance(second, SystemOneResponse) and qid in second.answers:
            answers[qid] = second.answers[qid]
            route = replace(route, answered_by="second", second=second.answers[qid])
        routes[qid] = route
    trace: dict[str, Any] = {
        "below": below,
        "servers": dict(servers),
        "questions": {qid: route.to_dict() for qid, route in routes.items()},
    }
    usage = response.usage
    reasoning = dict(response.reasoning)
    if isinstance(second, SystemOneResponse):
        usage = plus(usage, second.usage)
        trace["second_debug"] = second.debug
        reasoning.update({qid: r for qid, r in second.reasoning.items() if qid in answers})
    return replace(
        response,
        answers=answers,
        usage=usage,
        reasoning=reasoning,
        debug={**response.debug, "escalation": trace},
    )
