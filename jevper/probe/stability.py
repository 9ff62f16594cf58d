"""What moves an answer: the stability probes' readouts, the change between two of them, and the grade.

A stability probe sends one request several times, in a plan its kind names (`KINDS`), and its cassette
keeps every answer. Each answer is read into a `Readout`: per question, the probability of each option
(a prompt surface's label tokens A, B, C from the first answer token's alternatives; a System One or
Decisions answer's own distribution) and the option chosen. The change between two readouts is the
largest change of any option's probability; a flip is a question whose chosen option changed.

Every probe measures the server's own repeat noise in the same cassette (two warm answers to one
request) and grades its change against it: `identical` (bit for bit), `within noise` (no more than the
noise plus the tolerance, a setting in probes/presets.toml), or `moves`. The numbers go into the
verdict's `stability` record, which results.json keeps; a diff and the CI gate compare grades, and
treat a number that moved by no more than the tolerance as unchanged (`same`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from jevper._wire import WireResult
from jevper.probe.catalogue import read_data
from jevper.probe.prompts import LABELS, ROTATIONS, rotated_options

Grade = Literal["identical", "within noise", "moves"]
GRADES: tuple[Grade, ...] = ("identical", "within noise", "moves")

#: kind -> what its plan sends and what its change compares. The plans are composed in ``compose``.
KINDS: Mapping[str, str] = {
    "repeat": "the request `repeats` times; the first warms the prompt cache, the others are compared",
    "cache": "the request three times with a prompt no other probe sends: cold, then warm twice; "
    "the change is cold against warm",
    "load": "the request three times alone, then once among `load` concurrent requests of other prompts; "
    "the change is alone against among them",
    "variant": "the request and its variant, each once to warm the cache, then the request twice and "
    "the variant once; the change is each answer against the same question's in the variant",
    "option-order": "the question with its options in each rotation, once each; the change is each "
    "option's probability where it stands against where it first stood (a fact about the model)",
}
#: The classifier every stability probe names (jevper/probe/classifiers.py).
STABILITY_CLASSIFIER = "stability"
Kind = Literal["repeat", "cache", "load", "variant", "option-order"]
#: The options a variant probe's readout names a question by: its content, never its id or name.
ANSWER = "answer"


@dataclass(frozen=True)
class Settings:
    repeats: int
    load: int
    tolerance: float


@cache
def settings() -> Settings:
    """The stability settings of probes/presets.toml (`[stability]`)."""
    raw = read_data("presets.toml")["stability"]
    return Settings(repeats=int(raw["repeats"]), load=int(raw["load"]), tolerance=float(raw["tolerance"]))


@dataclass(frozen=True)
class Readout:
    """One answer as the stability probes compare it."""

    #: question -> option -> probability (empty for a question answered as text alone).
    probabilities: Mapping[str, Mapping[str, float]]
    #: question -> the option chosen (the answer text where no probability came back).
    chosen: Mapping[str, str]
    #: question -> the id or name it was asked under (where that is not the question's key).
    names: Mapping[str, str] = field(default_factory=dict)


def prompt_readout(result: WireResult, layout: str = "standard") -> Readout:
    """A prompt surface's answer: the labels' probabilities on the first answer token, by option name
    when the layout rotates the standard options (so a rotated answer reads against the first)."""
    names = dict(zip(LABELS, rotated_options(ROTATIONS[layout]), strict=True)) if layout in ROTATIONS else {}
    text = (result.text or "").strip()
    if not result.logprobs:
        chosen = names.get(text[:1], text) if names and text[:1] in LABELS and len(text) <= 2 else text
        return Readout({}, {ANSWER: chosen})
    shares: dict[str, float] = {}
    for token, logprob in result.logprobs[0].top:
        label = token.strip()
        if label in LABELS:
            option = names.get(label, label)
            shares[option] = shares.get(option, 0.0) + math.exp(logprob)
    chosen = max(shares, key=lambda k: shares[k]) if shares else text
    return Readout({ANSWER: shares}, {ANSWER: chosen})


def _content(question: Mapping[str, Any], *, drop: str) -> str:
    """A question named by what it asks, so the same question reads alike under another id or name."""
    return json.dumps({k: v for k, v in question.items() if k != drop}, sort_keys=True, ensure_ascii=False)


def systemone_readout(body: Any, questions: Mapping[str, Any]) -> Readout:
    """A System One answer: each question's distribution (a noul's as true and false)."""
    answers = body.get("answers") if isinstance(body, Mapping) else None
    probabilities: dict[str, dict[str, float]] = {}
    chosen: dict[str, str] = {}
    names: dict[str, str] = {}
    for qid, question in questions.items():
        answer = answers.get(qid) if isinstance(answers, Mapping) else None
        if not isinstance(answer, Mapping) or not isinstance(question, Mapping):
            continue
        key = _content(question, drop="")
        shares = _shares(answer.get("probabilities"), answer.get("noul"))
        probabilities[key] = shares
        chosen[key] = str(answer.get("choice", max(shares, key=lambda k: shares[k]) if shares else ""))
        names[key] = str(qid)
    return Readout(probabilities, chosen, names)


def decisions_readout(body: Any, questions: Sequence[Any]) -> Readout:
    """A Decisions answer: each question's distribution (a predicate's as true and false), by position."""
    answers = body.get("answers") if isinstance(body, Mapping) else None
    probabilities: dict[str, dict[str, float]] = {}
    chosen: dict[str, str] = {}
    names: dict[str, str] = {}
    for index, (question, answer) in enumerate(
        zip(questions, answers if isinstance(answers, list) else (), strict=False)
    ):
        if not isinstance(answer, Mapping) or not isinstance(question, Mapping):
            continue
        key = _content(question, drop="name")
        listed = answer.get("probabilities")
        table = (
            {str(p.get("value")): p.get("probability") for p in listed if isinstance(p, Mapping)}
            if isinstance(listed, list)
            else None
        )
        shares = _shares(table, answer.get("probability"))
        probabilities[key] = shares
        picked = answer.get("choice", answer.get("score"))
        chosen[key] = str(picked) if picked is not None else max(shares, key=lambda k: shares[k], default="")
        names[key] = str(question.get("name") or f"question {index + 1}")
    return Readout(probabilities, chosen, names)


def _shares(table: Any, probability: Any) -> dict[str, float]:
    if isinstance(table, Mapping):
        return {str(k): float(v) for k, v in table.items() if isinstance(v, int | float)}
    if isinstance(probability, int | float):
        return {"true": float(probability), "false": 1.0 - float(probability)}
    return {}


@dataclass(frozen=True)
class Change:
    """Two readouts compared: the largest change of an option's probability (None without any),
    how many questions changed their chosen option, and whether they are equal bit for bit."""

    largest: float | None
    flips: int
    equal: bool


def compare(a: Readout, b: Readout) -> Change:
    shared = [q for q in a.chosen if q in b.chosen]
    largest: float | None = None
    for question in shared:
        one, two = a.probabilities.get(question, {}), b.probabilities.get(question, {})
        if one or two:
            moved = max(abs(one.get(k, 0.0) - two.get(k, 0.0)) for k in {*one, *two})
            largest = moved if largest is None else max(largest, moved)
    flips = sum(1 for q in shared if a.chosen[q] != b.chosen[q])
    equal = all(
        a.chosen[q] == b.chosen[q] and a.probabilities.get(q) == b.probabilities.get(q) for q in shared
    )
    return Change(largest, flips, equal and bool(shared))


def worst(changes: Sequence[Change]) -> Change:
    """Several comparisons as one: the largest change, every flip, equal only if all are."""
    numbers = [c.largest for c in changes if c.largest is not None]
    return Change(
        max(numbers) if numbers else None, sum(c.flips for c in changes), all(c.equal for c in changes)
    )


@dataclass(frozen=True)
class Measure:
    """A stability probe's numbers and grade, as results.json keeps them (`stability`)."""

    kind: str
    grade: Grade
    change: float | None  # the largest change the probe measured (None: the answers carry no probability)
    noise: float | None  # the server's own repeat-to-repeat change in the same cassette
    tolerance: float
    flips: int
    answers: int  # how many answers were compared

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "grade": self.grade,
            "change": _rounded(self.change),
            "noise": _rounded(self.noise),
            "tolerance": self.tolerance,
            "flips": self.flips,
            "answers": self.answers,
        }


def _rounded(value: float | None) -> float | None:
    # Nine decimals: well under any tolerance, and a recording reads the same on every machine.
    return None if value is None else round(value, 9)


def grade(change: Change, noise: Change | None, tolerance: float) -> Grade:
    """identical bit for bit; within the noise plus the tolerance; or moves (a flip of a text answer,
    which carries no probability, moves)."""
    if change.equal:
        return "identical"
    if change.largest is None:
        return "within noise" if change.flips == 0 else "moves"
    allowed = tolerance + ((noise.largest or 0.0) if noise is not None else 0.0)
    return "within noise" if change.largest <= allowed else "moves"


def measure(kind: str, change: Change, noise: Change | None, tolerance: float, answers: int) -> Measure:
    return Measure(
        kind=kind,
        grade=grade(change, noise, tolerance),
        change=change.largest,
        noise=noise.largest if noise is not None else None,
        tolerance=tolerance,
        flips=change.flips,
        answers=answers,
    )


def describe(m: Measure) -> str:
    """The matrix cell: the grade, then the numbers it was made from."""
    flips = f"; {m.flips} {'flip' if m.flips == 1 else 'flips'}" if m.flips else "; no flip"
    noise = "" if m.noise is None else f", repeat noise {m.noise:.4g}"
    numbers = "answer text only" if m.change is None else f"largest change {m.change:.4g}"
    if m.grade == "identical":
        return f"identical: {m.answers} answers the same bit for bit"
    return f"{m.grade}: {numbers}{noise}, tolerance {m.tolerance:g}{flips}"


def same(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Two recordings' stability records tell the same: the same grade and flips, and each number
    within the tolerance of the other (the larger of the two recordings' tolerances)."""
    if old is None or new is None:
        return old is new
    if (old.get("grade"), old.get("flips")) != (new.get("grade"), new.get("flips")):
        return False
    tolerance = max(float(old.get("tolerance") or 0.0), float(new.get("tolerance") or 0.0))
    for name in ("change", "noise"):
        was, now = old.get(name), new.get(name)
        if (was is None) != (now is None):
            return False
        if was is not None and now is not None and abs(float(was) - float(now)) > tolerance:
            return False
    return True


def shown(readout: Readout) -> dict[str, Any]:
    """A readout as evidence: each question (by the id or name it was asked under) with its option
    chosen and its probabilities to four decimals."""
    return {
        readout.names.get(q, q): {"chosen": readout.chosen[q]}
        | {k: round(v, 4) for k, v in readout.probabilities.get(q, {}).items()}
        for q in readout.chosen
    }
