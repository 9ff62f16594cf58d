"""A Choice wider than a label readout, read in rounds of readouts: the same in every route.

A label readout names each option by one capital letter, so it reads 26 options at most, and asking
every option at once in JSON makes a prompt a small server's slot refuses. So a wider question is split
into groups that each fit a readout (26 options, and a bounded length of option text); each group is
asked as a question of its own, then the groups' most probable options against one another, in as
many rounds as needed. The answer is the chain of the readouts: ``p(o) = p(the winner of o's group) *
p(o within its group)``, which sums to 1 over every option and comes from the model's own numbers in
every round. The client, the batch engine and the gateway all answer through it (``_engine.answer``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING

from jevper._ask import MAX_LABELS
from jevper._distribution import rescaled
from jevper.models import ChoiceAnswer
from jevper.questions import Choice

if TYPE_CHECKING:
    from jevper._engine import Answered, Call
    from jevper._wire import WireResult

#: Option text (names and descriptions) per group: about 1,000 tokens of SmolLM2's tokenizer for plain
#: text, which leaves room for the instructions, the state and the template on a 2,048-token slot.
GROUP_CHARS = 3_000

#: Asks one question of the rounds (a group, or the winners), under the id it is traced by.
AskOne = Callable[[Choice, str], Generator["Call", "WireResult", "Answered"]]


def is_wide(question: Choice) -> bool:
    """More options than a label readout reads."""
    return len(question.options) > MAX_LABELS


def groups(question: Choice) -> list[list[str]]:
    """The options in groups of at most MAX_LABELS and GROUP_CHARS, in their order, sizes even."""
    options = list(question.options)
    count = -(-len(options) // MAX_LABELS)  # as few groups as the width allows, of even sizes
    while True:
        base, extra = divmod(len(options), count)
        sizes = [base + 1] * extra + [base] * (count - extra)  # sizes differ by one at most
        starts = [sum(sizes[:k]) for k in range(count)]
        split = [options[start : start + size] for start, size in zip(starts, sizes, strict=True)]
        # Groups of two at least, so each round leaves fewer options than it was given (a group of one
        # only where the count is odd; it is not asked).
        if all(_chars(question, g) <= GROUP_CHARS for g in split) or max(sizes) <= 2:
            return split
        count += 1


def in_rounds(
    question: Choice, ask: AskOne, qid: str
) -> Generator[Call, WireResult, tuple[dict[str, float], list[Answered]]]:
    """The distribution over every option, and the answer of every question asked on the way (in the
    order asked), one question at a time."""
    asked: list[Answered] = []
    distribution = yield from _round(question, ask, qid, asked, 1)
    return distribution, asked


def _round(
    question: Choice, ask: AskOne, qid: str, asked: list[Answered], number: int
) -> Generator[Call, WireResult, dict[str, float]]:
    split = groups(question)
    if len(split) == 1:
        last = yield from ask(question, f"{qid} (round {number})")
        asked.append(last)
        return rescaled(_choice(last).probabilities)
    within: list[dict[str, float]] = []
    for index, group in enumerate(split):
        if len(group) == 1:  # a very long description alone: it holds all of its group's mass
            within.append({group[0]: 1.0})
            continue
        one = yield from ask(_sub(question, group), f"{qid} (round {number}, group {index + 1})")
        asked.append(one)
        within.append(rescaled(_choice(one).probabilities))
    winners = [max(w, key=lambda o: w[o]) for w in within]
    final = yield from _round(_sub(question, winners), ask, qid, asked, number + 1)
    combined = {
        option: final[winner] * p
        for winner, group in zip(winners, within, strict=True)
        for option, p in group.items()
    }
    return {option: combined[option] for option in question.options}


def _chars(question: Choice, options: Sequence[str]) -> int:
    return sum(len(o) + len(str(question.criteria[o] or "")) for o in options)


def _sub(question: Choice, options: Sequence[str]) -> Choice:
    return Choice(criteria={o: question.criteria[o] for o in options}, instructions=question.instructions)


def _choice(answered: Answered) -> ChoiceAnswer:
    assert isinstance(answered.answer, ChoiceAnswer)
    return answered.answer
