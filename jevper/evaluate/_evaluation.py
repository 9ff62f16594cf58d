"""One evaluation: every figure of every question, before and (held out) after calibration.

``evaluate`` computes; ``Evaluation.to_json`` is ``metrics.json`` and ``Evaluation.calibration`` the
calibration fit on every row, bound to what the answers came from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from jevper.calibration import Threshold
from jevper.evaluate._calibration import Binding, Calibration, QuestionCalibration
from jevper.evaluate._fit import TOP, Calibrator
from jevper.evaluate._guarantee import Guarantee, guarantee
from jevper.evaluate._labels import Labelled
from jevper.evaluate._metrics import (
    ECE_BINS,
    Distribution,
    Reliability,
    Selective,
    accuracy,
    brier,
    expected_level_mae,
    nll,
    reliability,
    selective,
)
from jevper.evaluate._position import PositionBias
from jevper.evaluate._select import DEFAULT_FOLDS, DEFAULT_SEED, Selection, choose, held_out

#: 2: the bins' mean is ``top_probability`` (version 1 named it ``confidence``, the APIs' other figure).
VERSION = 2
KIND = "jevper.metrics"
DEFAULT_TARGET = 0.9
#: What a guaranteed threshold is a threshold of.
ANSWERED = "the top probability as answered"
HELD_OUT = (
    "the calibrated top probability, held out: each row calibrated by the map chosen and fit on the other "
    "folds (calibration.json's map is fit on every row)"
)
#: What each figure means, written into metrics.json beside the figures.
DEFINITIONS = {
    "top_probability": "the top probability of a row's distribution, which the bins and thresholds are "
    "of (not the System One API's confidence, which rescales it); the predicted option is the most "
    "probable, the first of equal ones",
    "ece": f"top-label expected calibration error over {ECE_BINS} bins: the row-weighted mean of "
    "|accuracy - mean top probability| per bin; equal_width bins have edges at i/15, equal_mass bins at the "
    "quantiles of the top probabilities (linear between order statistics); a bin holds (lower, upper], the "
    "first also its lower edge",
    "brier": "multi-class Brier score (Brier 1950): the mean over rows of the sum over options of "
    "(p - 1[gold])^2, 0 to 2; a yes/no question's is twice the binary (p_true - y)^2",
    "nll": "mean negative log-likelihood of the gold option in nats, its probability floored at 1e-12",
    "expected_level_mae": "a score's mean |expected level - gold level|, levels as indices",
    "selective": "at each threshold, the share of rows whose top probability is at least it "
    "(coverage) and their accuracy; reached: the smallest threshold whose rows reach the target accuracy",
    "position_bias": "the rows asked again with a choice's options rotated: changed is the share of "
    "rotated answers that differ from the row's answer in the original order, rows_changed the share of "
    "rows with any change, by_position the share of all answers at each position; prior_corrected: the "
    "same after dividing each order's answers by that order's mean distribution (no labels used)",
    "guarantee": "with --risk D: the top probability at or above which the answers are right at least the "
    "target accuracy of the time, with probability at least 1 - D over the labelled rows (Learn-then-Test: "
    "fixed-sequence testing of the thresholds 1.00, 0.99, ..., 0.00 by the exact binomial test); threshold "
    "null: none met the target, every answer goes to review; per_label: the same on the answers whose top "
    "option is each label; lower_bound: the Clopper-Pearson lower bound of the accuracy at the threshold",
    "after": "held out: each of k folds calibrated by the method an inner k-fold cross-validation chose "
    "on the other folds (by NLL), fit on them",
}


@dataclass(frozen=True)
class Figures:
    n: int
    accuracy: float
    equal_width: Reliability
    equal_mass: Reliability
    brier: float
    nll: float
    expected_level_mae: float | None
    selective: Selective

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = _finite(
            {
                "n": self.n,
                "accuracy": self.accuracy,
                "ece": {
                    "equal_width": _reliability(self.equal_width),
                    "equal_mass": _reliability(self.equal_mass),
                },
                "brier": self.brier,
                "nll": self.nll,
                **(
                    {"expected_level_mae": self.expected_level_mae}
                    if self.expected_level_mae is not None
                    else {}
                ),
                "selective": {
                    "target_accuracy": self.selective.target,
                    "reached": asdict(self.selective.reached) if self.selective.reached else None,
                    "curve": [asdict(point) for point in self.selective.curve],
                },
            }
        )
        return value


def figures(
    kind: str, probabilities: Sequence[Distribution], gold: Sequence[int], target: float = DEFAULT_TARGET
) -> Figures:
    return Figures(
        len(gold),
        accuracy(probabilities, gold),
        reliability(probabilities, gold, "equal_width"),
        reliability(probabilities, gold, "equal_mass"),
        brier(probabilities, gold),
        nll(probabilities, gold),
        expected_level_mae(probabilities, gold) if kind == "score" else None,
        selective(probabilities, gold, target),
    )


def methods_for(kind: str, content_free: bool = False) -> tuple[str, ...]:
    """The candidates tried for a question of ``kind``, simplest first (a tie goes to the simpler): each
    method alone, then each followed by the top-label map."""
    methods: tuple[str, ...] = ("identity", "temperature", "prior", "prior_temperature")
    if content_free:
        methods += ("content_free", "content_free_temperature")
    if kind == "noul":
        methods += ("platt", "beta")
    return (*methods, *(m + TOP for m in methods))


@dataclass(frozen=True)
class QuestionEvaluation:
    labelled: Labelled
    before: Figures
    #: held out, when a calibration was fit
    after: Figures | None = None
    #: the method chosen on every row, each method's out-of-fold NLL, and its fit
    selection: Selection | None = None
    #: the method each outer fold chose (they may differ from the one chosen on every row)
    fold_methods: tuple[str, ...] = ()
    position: PositionBias | None = None
    #: why no calibration was fit, when one was asked for
    not_fit: str | None = None
    #: the model's mean answer to content-free states, when it was asked
    content_free: Distribution | None = None
    #: the guaranteed thresholds, when a risk was given
    guarantee: Guarantee | None = None

    def to_json(self) -> dict[str, Any]:
        q = self.labelled
        value: dict[str, Any] = {
            "type": q.type,
            "options": list(q.options),
            "unanswered": q.unanswered,
            "unlabelled": q.unlabelled,
            "before": self.before.to_json(),
            "position_bias": self.position.to_json() if self.position else None,
        }
        if self.content_free is not None:
            value["content_free_prior"] = list(self.content_free)
        if self.selection is not None and self.after is not None:
            value["calibration"] = {
                **self.selection.calibrator.to_json(),
                "method": self.selection.method,
                "held_out_nll": _finite(self.selection.scores),
                "fold_methods": list(self.fold_methods),
            }
            value["after"] = self.after.to_json()
        elif self.not_fit:
            value["calibration"] = {"not_fit": self.not_fit}
        if self.guarantee is not None:
            value["guarantee"] = _finite(self.guarantee.to_json())
        return value

    def threshold(self) -> Threshold | None:
        """The guaranteed threshold as calibration.json holds it."""
        g = self.guarantee
        if g is None:
            return None
        labels = None if g.labels is None else {label: c.threshold for label, c in g.labels.items()}
        return Threshold(g.target, g.risk, g.question.rows, g.question.threshold, labels)


@dataclass(frozen=True)
class Evaluation:
    questions: Mapping[str, QuestionEvaluation]
    fit: bool
    folds: int
    seed: int
    target: float

    def to_json(self, source: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {
            "version": VERSION,
            "kind": KIND,
            "source": dict(source or {}),
            "definitions": DEFINITIONS,
            "calibrated": self.fit,
            "folds": self.folds,
            "seed": self.seed,
            "questions": {qid: q.to_json() for qid, q in self.questions.items()},
        }

    def calibration(self, bound_to: Binding) -> Calibration:
        """The calibration fit on every row (identity where a question had too few rows to fit)."""
        return Calibration(
            bound_to,
            {
                qid: QuestionCalibration(
                    q.labelled.type,
                    q.labelled.options,
                    q.selection.calibrator if q.selection else Calibrator(),
                    dict(q.selection.scores) if q.selection else {},
                    threshold=q.threshold(),
                )
                for qid, q in self.questions.items()
            },
            self.folds,
            self.seed,
        )


def evaluate(
    labelled: Mapping[str, Labelled],
    *,
    fit: bool = False,
    folds: int = DEFAULT_FOLDS,
    seed: int = DEFAULT_SEED,
    target: float = DEFAULT_TARGET,
    positions: Mapping[str, PositionBias] | None = None,
    content_free: Mapping[str, Distribution] | None = None,
    risk: float | None = None,
    per_label: bool = False,
) -> Evaluation:
    """Every figure of every question; with ``fit``, each question's calibration chosen by held-out NLL
    and its held-out figures after. ``content_free``: per question, the model's mean answer to
    content-free states, which adds the content-free prior corrections to the methods tried. ``risk``:
    each question's guaranteed threshold for ``target`` (``_guarantee``), on the held-out calibrated top
    probability where a calibration is fit, else on the answers' own; ``per_label``: one per label too."""
    done: dict[str, QuestionEvaluation] = {}
    for qid, q in labelled.items():
        before = figures(q.type, q.probabilities, q.gold, target)
        position = (positions or {}).get(qid)
        prior = (content_free or {}).get(qid)
        guaranteed = _guaranteed(q, target, risk, per_label)
        if not fit or len(q.gold) < 2 * folds:
            why = (
                f"expected at least {2 * folds} labelled, answered rows for {folds} folds, got {len(q.gold)}"
                if fit
                else None
            )
            on = ANSWERED if not fit else f"{ANSWERED} (no calibration fit: {why})"
            done[qid] = QuestionEvaluation(
                q,
                before,
                position=position,
                not_fit=why,
                content_free=prior,
                guarantee=guaranteed(q.probabilities, on) if guaranteed else None,
            )
            continue
        methods = methods_for(q.type, prior is not None)
        selection = choose(methods, q.probabilities, q.gold, folds, seed, prior)
        predicted, fold_methods = held_out(methods, q.probabilities, q.gold, folds, seed, prior)
        after = figures(q.type, predicted, q.gold, target)
        done[qid] = QuestionEvaluation(
            q,
            before,
            after,
            selection,
            tuple(fold_methods),
            position,
            content_free=prior,
            guarantee=guaranteed(predicted, HELD_OUT) if guaranteed else None,
        )
    return Evaluation(done, fit, folds, seed, target)


def _guaranteed(
    q: Labelled, target: float, risk: float | None, per_label: bool
) -> Callable[[Sequence[Distribution], str], Guarantee] | None:
    """The question's guarantee on the distributions given (what they are: ``on``); None without a risk."""
    if risk is None:
        return None
    return lambda probabilities, on: guarantee(
        q.options, probabilities, q.gold, target, risk, on=on, per_label=per_label
    )


def _reliability(r: Reliability) -> dict[str, Any]:
    return {"bins_count": len(r.bins), "value": r.ece, "bins": [asdict(b) for b in r.bins]}


def _finite(value: Any) -> Any:
    """NaN and infinities as null: metrics.json is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
