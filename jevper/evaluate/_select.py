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

from jevper.evaluate._fit import Calibrator, fit
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

    def fitted(train_p: Sequence[Distribution], train_gold: Sequence[int]) -> tuple[Calibrator, str]:
        return fit(method, train_p, train_gold, content_free), method

    return _across_folds(probabilities, gold, k, seed, fitted)[0]


def choose(
    methods: Sequence[str],
    probabilities: Sequence[Distribution],
    gold: Sequence[int],
    k: int = DEFAULT_FOLDS,
    seed: int = DEFAULT_SEED,
    content_free: Distribution | None = None,
) -> Selection:
    scores: dict[str, float] = {
        m: nll(out_of_fold(m, probabilities, gold, k, seed, content_free), gold) for m in methods
    }
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

    def fitted(train_p: Sequence[Distribution], train_gold: Sequence[int]) -> tuple[Calibrator, str]:
        picked = choose(methods, train_p, train_gold, k, seed + 1, content_free)
        return picked.calibrator, picked.method

    return _across_folds(probabilities, gold, k, seed, fitted)


def _across_folds(
    probabilities: Sequence[Distribution],
    gold: Sequence[int],
    k: int,
    seed: int,
    fitted: Callable[[Sequence[Distribution], Sequence[int]], tuple[Calibrator, str]],
) -> tuple[list[Distribution], list[str]]:
    """The one fold loop: each fold's rows mapped by what ``fitted`` makes of the other folds' rows; the
    predictions, and the name of what each fold's map was."""
    predicted: list[Distribution] = list(probabilities)
    names: list[str] = []
    for held in folds(len(gold), k, seed):
        inside = set(held)
        train = [i for i in range(len(gold)) if i not in inside]
        calibrator, name = fitted([probabilities[i] for i in train], [gold[i] for i in train])
        names.append(name)
        for i in held:
            predicted[i] = calibrator.apply(probabilities[i])
    return predicted, names
