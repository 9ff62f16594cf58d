"""Choice questions wider than one label readout, answered in rounds that each fit the upstream.

A label readout names each option by one capital letter, so it reads 26 options at most; asking 255
options at once in JSON instead costs a prompt of over 4,000 tokens for 64 of them (measured: llama.cpp
refused 4,611 tokens on its 2,048-token slot). So a wide question is split into groups that each fit a
readout (26 options, and a bounded length of option text), every group is asked on its own, and the
groups' most probable options are asked again against one another, in as many rounds as needed. The
answer is the chain of the two readouts: ``p(o) = p(the winner of o's group) * p(o within its group)``,
which sums to 1 over every option and comes from the model's own numbers in both rounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from jevper import Choice
from jevper.models import Answer, ChoiceAnswer, SystemOneResponse, Usage
from jevper.questions import Question

#: The label readout's width: one capital letter per option.
GROUP_OPTIONS = 26
#: Option text (names and descriptions) per group: ~1,000 tokens of SmolLM2's tokenizer for plain text,
#: which leaves room for the instructions, the state and the template on a 2,048-token slot.
GROUP_CHARS = 3_000

Ask = Callable[[Mapping[str, Question]], Awaitable[SystemOneResponse]]


def is_wide(question: Question) -> bool:
    return isinstance(question, Choice) and len(groups(question)) > 1


def groups(question: Choice) -> list[list[str]]:
    """The options in groups of at most GROUP_OPTIONS and GROUP_CHARS, in their order, sizes even."""
    options = list(question.options)
    count = -(-len(options) // GROUP_OPTIONS)  # as few groups as the width allows, of even sizes
    while True:
        base, extra = divmod(len(options), count)
        sizes = [base + 1] * extra + [base] * (count - extra)  # sizes differ by one at most
        starts = [sum(sizes[:k]) for k in range(count)]
        split = [options[start : start + size] for start, size in zip(starts, sizes, strict=True)]
        size = max(sizes)
        # Groups of two at least, so each round leaves fewer options than it was given (a group of one
        # only where the count is odd; it is not asked).
        if all(_chars(question, g) <= GROUP_CHARS for g in split) or size <= 2:
            return split
        count += 1


def _chars(question: Choice, options: Sequence[str]) -> int:
    return sum(len(o) + len(str(question.criteria[o] or "")) for o in options)


def _sub(question: Choice, options: Sequence[str]) -> Choice:
    return Choice(criteria={o: question.criteria[o] for o in options}, instructions=question.instructions)


@dataclass
class _Spent:
    prompt: int | None = None
    completion: int | None = None
    requests: int = 0

    def add(self, usage: Usage) -> None:
        self.requests += usage.requests
        if usage.prompt_tokens is not None:
            self.prompt = (self.prompt or 0) + usage.prompt_tokens
        if usage.completion_tokens is not None:
            self.completion = (self.completion or 0) + usage.completion_tokens


async def answer_wide(question: Choice, ask: Ask, spent: _Spent) -> ChoiceAnswer:
    """One wide question, in rounds; each round's groups are asked together (they share the pool)."""
    split = groups(question)
    if len(split) == 1:
        alone = await ask({"q": question})
        spent.add(alone.usage)
        return _choice(alone.answers["q"])
    # A group of one option (a very long description) is not asked: it holds all of its group's mass.
    asked = {str(i): _sub(question, g) for i, g in enumerate(split) if len(g) > 1}
    response: SystemOneResponse | None = await ask(asked) if asked else None
    if response is not None:
        spent.add(response.usage)
    within: list[dict[str, float]] = []
    for i, group in enumerate(split):
        if len(group) == 1:
            within.append({group[0]: 1.0})
        else:
            assert response is not None
            answered = _choice(response.answers[str(i)])
            total = sum(answered.probabilities.values())
            within.append({o: p / total for o, p in answered.probabilities.items()})
    winners = [max(w, key=lambda o: w[o]) for w in within]
    final = await answer_wide(_sub(question, winners), ask, spent)
    mass = final.probabilities
    total = sum(mass.values())
    combined = {
        option: mass[winner] / total * p
        for winner, group in zip(winners, within, strict=True)
        for option, p in group.items()
    }
    best = max(combined, key=lambda o: combined[o])
    ordered = {o: combined[o] for o in question.options}
    return ChoiceAnswer(best, ordered, _confidence(ordered[best], len(ordered)), final.method, final.surface)


def _confidence(peak: float, n: int) -> float:
    """The API's choice confidence, ``(p_max - 1/n) / (1 - 1/n)`` (as every answer of jevper has it; the
    client core's own function is private to it). A wide question has n > 26."""
    return max(0.0, min(1.0, (peak - 1 / n) / (1 - 1 / n)))


def _choice(answer: Answer) -> ChoiceAnswer:
    assert isinstance(answer, ChoiceAnswer)
    return answer


async def answer_all(questions: Mapping[str, Question], ask: Ask, model: str) -> SystemOneResponse:
    """Every question: the narrow ones in one call, each wide one in rounds, all at once."""
    wide = [qid for qid, q in questions.items() if isinstance(q, Choice) and is_wide(q)]
    if not wide:
        return await ask(questions)
    narrow = {qid: q for qid, q in questions.items() if qid not in wide}
    spent = _Spent()

    async def the_narrow() -> dict[str, Answer]:
        if not narrow:
            return {}
        response = await ask(narrow)
        spent.add(response.usage)
        return response.answers

    # A task group: when one question fails, the others stop asking; its failure is raised as it came,
    # with the cause the pool reads to tell an upstream's failure (``__cause__``) kept.
    try:
        async with asyncio.TaskGroup() as group:
            rest = group.create_task(the_narrow())
            widened = {qid: group.create_task(answer_wide(_wide(questions[qid]), ask, spent)) for qid in wide}
    except ExceptionGroup as failed:
        first = failed.exceptions[0]
        raise first from first.__cause__
    found: dict[str, Answer] = {**rest.result(), **{qid: task.result() for qid, task in widened.items()}}
    usage = Usage(prompt_tokens=spent.prompt, completion_tokens=spent.completion, requests=spent.requests)
    return SystemOneResponse(answers={qid: found[qid] for qid in questions}, usage=usage, model=model)


def _wide(question: Question) -> Choice:
    assert isinstance(question, Choice)
    return question
