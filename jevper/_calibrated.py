"""A call's answers through the client's calibration.

Each question the calibration holds a map for is checked (its layout, and the method and surface its
answer was read with) and its distribution mapped: the answer still sums to 1, and its pick, score and
confidence follow the calibrated distribution. A question the calibration holds no map for is passed
through as it came (a calibration fit on some questions may serve calls that ask others too). The
response's trace (``debug["calibration"]``) names the file, each question's method, the questions passed
through, and the binding fields a client cannot see (the server's kind and release).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from jevper._distribution import choice_confidence, score_confidence
from jevper._options import Options
from jevper.calibration import Calibration, prompt_digest
from jevper.models import Answer, ChoiceAnswer, NoulAnswer, ScoreAnswer, SystemOneResponse
from jevper.questions import Question

#: What a client cannot know of the server it asks, so never compares.
UNCHECKED = ("server_kind", "server_release")


@dataclass(frozen=True)
class Calibrated:
    """The trace of a call's calibration: the file, each calibrated question's method, the questions
    passed through."""

    source: str | None
    methods: Mapping[str, str]
    passed_through: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.source,
            "calibrated": dict(self.methods),
            "passed_through": list(self.passed_through),
            "unchecked": list(UNCHECKED),
        }


def calibrated(
    options: Options, questions: Sequence[tuple[str, Question]], response: SystemOneResponse
) -> SystemOneResponse:
    """``response`` with every answer the client's calibration holds a map for calibrated."""
    asked = [(qid, question, response.answers[qid]) for qid, question in questions]
    answers, trace = calibrate(options, asked)
    if trace is None:
        return response
    return replace(
        response,
        answers={qid: answer for (qid, _, _), answer in zip(asked, answers, strict=True)},
        debug={**response.debug, "calibration": trace.to_dict()},
    )


def calibrate(
    options: Options, asked: Sequence[tuple[str, Question, Answer]]
) -> tuple[list[Answer], Calibrated | None]:
    """Each answer, in order, calibrated where the calibration holds a map for its question's id (a
    Decisions question's id is its name); None for the trace when the client has no calibration."""
    calibration = options.calibration
    if calibration is None:
        return [answer for _, _, answer in asked], None
    fitted = [(qid, q) for qid, q, _ in asked if qid in calibration.questions]
    if any(calibration.questions[qid].prompt_digest is None for qid, _ in fitted):
        # A file without each question's own digest: only the whole layout can be compared.
        calibration.check_fields(prompt_digest=prompt_digest({qid: q for qid, q, _ in asked}))
    for qid, question in fitted:
        calibration.check_layout(qid, question)
    answers = [
        _mapped(calibration, options, qid, question, answer) if qid in calibration.questions else answer
        for qid, question, answer in asked
    ]
    trace = Calibrated(
        calibration.source,
        {qid: calibration.questions[qid].calibrator.name for qid, _ in fitted},
        tuple(qid for qid, _, _ in asked if qid not in calibration.questions),
    )
    return answers, trace


def _mapped(
    calibration: Calibration, options: Options, qid: str, question: Question, answer: Answer
) -> Answer:
    bound = calibration.bound_to
    # Asked with "auto", an answer is checked by the method and surface it was read with.
    if bound.method not in (options.method, answer.method):
        calibration.check_fields(method=answer.method)
    if bound.surface not in (options.api, answer.surface):
        calibration.check_fields(surface=answer.surface)
    if isinstance(answer, NoulAnswer):
        given = answer.probabilities
        mapped = calibration.mapped(qid, {"true": given.get("yes", 0.0), "false": given.get("no", 0.0)})
        yes, no = mapped["true"], mapped["false"]
        return replace(
            answer, noul=yes, probabilities={"yes": yes, "no": no}, confidence=choice_confidence([yes, no])
        )
    if isinstance(answer, ChoiceAnswer):
        mapped = calibration.mapped(qid, answer.probabilities)
        ordered = {option: mapped[option] for option in question.options}
        best = max(ordered, key=lambda option: ordered[option])
        return replace(
            answer, choice=best, probabilities=ordered, confidence=choice_confidence(list(ordered.values()))
        )
    assert isinstance(answer, ScoreAnswer)
    mapped = calibration.mapped(qid, {str(level): p for level, p in answer.probabilities.items()})
    levels = [mapped[option] for option in question.options]
    return replace(
        answer,
        score=sum(i * p for i, p in enumerate(levels)),
        probabilities=dict(enumerate(levels)),
        confidence=score_confidence(levels),
    )
