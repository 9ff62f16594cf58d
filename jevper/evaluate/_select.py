"""Choosing a question's calibration by held-out NLL, and its held-out figures.

The rows are cut into k folds (shuffled by a seeded generator, so a run is repeatable). A method's score
is the NLL of its out-of-fold predictions: each fold predicted by the method fit on the other folds. The
method with the lowest wins (``identity`` among them, so a calibration never loses to none on these rows).
The figures "after" are held out twice over: each outer fold is predicted by the method that an inner
cross-validation chose on the other folds, fit on them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jevper.evaluate._fit import Calibrator, fit, fit_each
from jevper.evaluate._metrics import Distribution, nll

DEFAULT_FOLDS = 5
DEFAULT_SEED = 0


@dataclass(frozen=True)
class Selection:
    """The method chosen, each method's out-of-fold NLL, and the calibrator fit on every row."""

    method: str  # a method, or a method then the top-label map ("prior_temperature+top")
    scores: dict[str, float]
    calibrator: Calibrator


def folds(n: int, k: int, seed: int = DEFAULT_SEED) -> list[list[int]]:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return [sorted(order[i::k]) for i in range(k)]


def out_of_fold(
    method: str,
    probabilities: Sequence[Distribution],
    gold: Sequence[int],
    k: int,
    seed: int = DEFAULT_SEED,
    content_free: Distribution | None = None,
) -> list[Distribution]:
    """Each row predicted by ``method`` fit on the folds that do not hold it."""
    return _out_of_fold((method,), probabilities, gold, k, seed, content_free)[0]


def _out_of_fold(
    methods: Sequence[str],
    probabilities: Sequence[Distribution],
    gold: Sequence[int],
    k: int,
    seed: int,
    content_free: Distribution | None,
) -> list[list[Distribution]]:
    """``out_of_fold`` of each method, the methods fit together on each fold's other rows (``fit_each``:
    a method and its ``+top`` share the method's map)."""

    def fitted(train_p: Sequence[Distribution], train_gold: Sequence[int]) -> list[tuple[str, Calibrator]]:
        return list(zip(methods, fit_each(methods, train_p, train_gold, content_free), strict=True))

    return _across_folds(probabilities, gold, k, seed, len(methods), fitted)[0]


def choose(
    methods: Sequence[str],
    probabilities: Sequence[Distribution],
    gold: Sequence[int],
    k: int = DEFAULT_FOLDS,
    seed: int = DEFAULT_SEED,
    content_free: Distribution | None = None,
) -> Selection:
    predictions = _out_of_fold(methods, probabilities, gold, k, seed, content_free)
    scores: dict[str, float] = {m: nll(p, gold) for m, p in zip(methods, predictions, strict=True)}
    # Ties go to the earlier (simpler) method in ``methods``.
    best = min(methods, key=lambda m: (scores[m], methods.index(m)))
    return Selection(best, dict(scores), fit(best, probabilities, gold, content_free))


def held_out(
    methods: Sequence[str],
    probabilities: Sequence[Distribution],
    gold: Sequence[int],
    k: int = DEFAULT_FOLDS,
    seed: int = DEFAULT_SEED,
    content_free: Distribution | None = None,
) -> tuple[list[Distribution], list[str]]:
    """Every row calibrated by what was chosen and fit without it: the predictions, and the method each
    outer fold chose."""

    def fitted(train_p: Sequence[Distribution], train_gold: Sequence[int]) -> list[tuple[str, Calibrator]]:
        picked = choose(methods, train_p, train_gold, k, seed + 1, content_free)
        return [(picked.method, picked.calibrator)]

    predicted, names = _across_folds(probabilities, gold, k, seed, 1, fitted)
    return predicted[0], names[0]


def _across_folds(
    probabilities: Sequence[Distribution],
    gold: Sequence[int],
    k: int,
    seed: int,
    maps: int,
    fitted: Callable[[Sequence[Distribution], Sequence[int]], Sequence[tuple[str, Calibrator]]],
) -> tuple[list[list[Distribution]], list[list[str]]]:
    """The one fold loop: each fold's rows mapped by each of the ``maps`` maps that ``fitted`` makes of
    the other folds' rows (a name and a calibrator each); per map, the predictions, and the name of what
    it was in each fold."""
    predicted: list[list[Distribution]] = [list(probabilities) for _ in range(maps)]
    names: list[list[str]] = [[] for _ in range(maps)]
    for held in folds(len(gold), k, seed):
        inside = set(held)
        train = [i for i in range(len(gold)) if i not in inside]
        made = fitted([probabilities[i] for i in train], [gold[i] for i in train])
        for slot, (name, calibrator) in enumerate(made):
            names[slot].append(name)
            for i in held:
                predicted[slot][i] = calibrator.apply(probabilities[i])
    return predicted, names
