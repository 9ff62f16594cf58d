"""A choice asked in several orders of its options, its answers averaged (``option_orders=N``).

A small model favours an option for where it stands (the position bias reports/performance.md measures
under "Evaluation and calibration"). ``option_orders=N`` asks each choice with its options in the first N
cyclic orders (as given, then starting from the second option, and so on; at most one order per
option) and answers with the mean of the N distributions, each read back option by option: an option's
place then weighs less in the answer, at N requests where one was asked. Yes/no questions and scores
are asked once: their options have an order of meaning, not of presentation.

Like the engine, this never performs I/O: the clients ask every order as a question of the call
(``expanded``), concurrently as they ask a call's questions, and fold the answers back (``folded``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

from jevper._distribution import choice_confidence, renormalised
from jevper._engine import Answered, Trail
from jevper.models import ChoiceAnswer
from jevper.questions import Choice, Question

E = TypeVar("E")


def expanded(questions: Sequence[tuple[str, Question]], orders: int) -> tuple[tuple[str, Question], ...]:
    """Every question as it is asked: a choice once per order (``orders_of``), rotated, under the
    question's own id; anything else once. The clients ask these as they ask a call's questions,
    concurrently."""
    return tuple(
        (qid, question.rotated(by) if isinstance(question, Choice) and by else question)
        for qid, question in questions
        for by in orders_of(question, orders)
    )


def folded(
    questions: Sequence[tuple[str, Question]], results: Sequence[Answered | E], orders: int
) -> list[Answered | E]:
    """One result per question from ``expanded``'s results, in order: a choice's orders averaged, or the
    first failure among them (a question one of whose orders could not be read is not answered)."""
    found: list[Answered | E] = []
    at = 0
    for _, question in questions:
        count = len(orders_of(question, orders))
        group = results[at : at + count]
        at += count
        failed = [r for r in group if not isinstance(r, Answered)]
        if count == 1 or failed:
            found.append(failed[0] if failed else group[0])
        else:
            assert isinstance(question, Choice)
            found.append(averaged(question, [r for r in group if isinstance(r, Answered)]))
    return found


def orders_of(question: Question, orders: int) -> list[int]:
    """The rotations a question is asked under: ``[0]`` but for a choice asked in ``orders`` > 1 orders."""
    if not isinstance(question, Choice) or orders < 2:
        return [0]
    return list(range(min(orders, len(question.criteria))))


def averaged(question: Choice, answered: list[Answered]) -> Answered:
    """One answer from each order's (``answered[k]`` asked under rotation k): the mean of the orders'
    distributions, in the question's own order, picks the option and gives the confidence; the
    probabilities shown are each option's mean of what the orders show (the model's own numbers under
    ``normalize_probabilities=False``, which only a rescaled distribution may be averaged to pick from);
    the first order's method, surface and reasoning; each order's trail, one after the other, its
    reasons prefixed with the option it began with."""
    options = question.options
    given = [a.answer for a in answered if isinstance(a.answer, ChoiceAnswer)]
    assert len(given) == len(answered)
    rescaled = [renormalised([float(a.probabilities[o]) for o in options]) for a in given]
    mean = [sum(p[i] for p in rescaled) / len(rescaled) for i in range(len(options))]
    shown = {o: sum(float(a.probabilities[o]) for a in given) / len(given) for o in options}
    # The first of the options tied, in the question's own order.
    best = options[max(range(len(options)), key=lambda i: (mean[i], -i))]
    trail = Trail()
    for by, one in enumerate(answered):
        lead = options[by % len(options)]
        trail.requests += one.trail.requests
        trail.why.extend(f"options from {lead!r}: {why}" for why in one.trail.why)
        trail.results.extend(one.trail.results)
        trail.prefill_replies.extend(one.trail.prefill_replies)
    first = answered[0]
    trail.prefill = first.trail.prefill
    each = [a.choice for a in given]
    trail.why.append(f"the mean of {len(given)} orders of the options (option_orders); their choices: {each}")
    averaged_answer = replace(given[0], choice=best, probabilities=shown, confidence=choice_confidence(mean))
    return Answered(averaged_answer, trail, first.surface, first.method)
