"""The fits of the calibration maps: a temperature, Platt scaling for a yes/no question, and a label-free
prior correction. The maps themselves (``Calibrator``) are ``jevper.calibration``'s, which the clients
apply.

A ``Calibrator`` takes a distribution over a question's options to another that sums to 1:

- ``temperature``: ``p_k ** (1 / T)``, renormalised (softmax of the log-probabilities over T), T fit by
  NLL with a golden-section search on log T, within T_RANGE;
- ``prior``: ``p_k / prior_k``, renormalised, where the prior is the mean distribution of the rows it was
  fit on, labels unused (the batch-mean prior of Batch Calibration; a content-free answer's distribution
  from "Calibrate Before Use" is used the same way), floored at ``prior_floor``;
- ``prior_temperature``: the prior correction, then a temperature fit on the corrected distributions;
- ``content_free`` and ``content_free_temperature``: the same with the prior of "Calibrate Before Use":
  the model's mean answer to content-free states ("N/A", "[MASK]"), asked of the server, not fit;
- ``platt`` (a yes/no question): ``sigmoid(a * logit(p_true) + b)``, a and b fit by NLL (Newton's method)
  against Platt's smoothed targets, not 0 and 1, so rows a threshold separates give a finite slope;
- ``identity``: the distribution as it came.

The maps fit to labels (those with a temperature, and Platt) keep the number of rows, which bounds what
they say (``jevper.calibration.bounded``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from jevper.calibration import METHODS, Calibrator, Distribution, Method, divided, tempered
from jevper.calibration import logit as _logit
from jevper.calibration import sigmoid as _sigmoid
from jevper.evaluate._metrics import FLOOR, nll

__all__ = [
    "METHODS",
    "T_RANGE",
    "Calibrator",
    "Method",
    "divided",
    "fit",
    "fit_platt",
    "fit_temperature",
    "fitted_nll",
    "mean_prior",
    "prior_floor",
    "tempered",
]

#: The temperature is searched between these: below 0.25 (log-odds sharpened more than fourfold) the fit
#: is chasing rows a threshold separates, not calibrating; above 50 the answer is all but uniform.
T_RANGE = (0.25, 50.0)
_GOLDEN = (math.sqrt(5) - 1) / 2


def mean_prior(probabilities: Sequence[Distribution]) -> tuple[float, ...]:
    """The mean distribution over rows: the model's lean towards each option, whatever the row."""
    n = len(probabilities)
    return tuple(sum(p[k] for p in probabilities) / n for k in range(len(probabilities[0])))


def prior_floor(options: int, rows: int) -> float:
    """The least prior a correction divides by: the mean over ``rows`` rows with one more row answered
    uniformly, as Laplace would count it, cannot go below this (so no option's odds gain more than
    ``options * (rows + 1)``-fold)."""
    return 1.0 / (options * (rows + 1))


def fit_temperature(probabilities: Sequence[Distribution], gold: Sequence[int]) -> float:
    """The T in T_RANGE minimising the NLL of softmax(log p / T), by golden-section search on log T
    (the NLL is convex in 1/T, so it has one minimum along log T)."""
    logs = [[math.log(max(x, FLOOR)) for x in p] for p in probabilities]

    def loss(log_t: float) -> float:
        inverse = math.exp(-log_t)
        total = 0.0
        for row, g in zip(logs, gold, strict=True):
            scaled = [x * inverse for x in row]
            top = max(scaled)
            total += top + math.log(sum(math.exp(x - top) for x in scaled)) - scaled[g]
        return total

    low, high = math.log(T_RANGE[0]), math.log(T_RANGE[1])
    a = high - _GOLDEN * (high - low)
    b = low + _GOLDEN * (high - low)
    fa, fb = loss(a), loss(b)
    while high - low > 1e-4:  # T to within 0.01 %
        if fa <= fb:
            high, b, fb = b, a, fa
            a = high - _GOLDEN * (high - low)
            fa = loss(a)
        else:
            low, a, fa = a, b, fb
            b = low + _GOLDEN * (high - low)
            fb = loss(b)
    return math.exp((low + high) / 2)


def fit_platt(probabilities: Sequence[Distribution], gold: Sequence[int]) -> tuple[float, float]:
    """a and b minimising the NLL of sigmoid(a * logit(p_true) + b), where option 0 is true: Newton's
    method on the two parameters, each step halved until the loss falls. The targets are Platt's:
    (N+ + 1) / (N+ + 2) for a true row, 1 / (N- + 2) for a false one, so the loss has a finite minimum
    even when a threshold separates the rows (with 0 and 1 the slope grows without end)."""
    z = [_logit(p[0]) for p in probabilities]
    positives = sum(1 for g in gold if g == 0)
    negatives = len(gold) - positives
    yes, no = (positives + 1) / (positives + 2), 1 / (negatives + 2)
    y = [yes if g == 0 else no for g in gold]

    def loss(a: float, b: float) -> float:
        return sum(_softplus(a * zi + b) - yi * (a * zi + b) for zi, yi in zip(z, y, strict=True))

    a, b = 1.0, 0.0
    current = loss(a, b)
    for _ in range(100):
        ga = gb = haa = hab = hbb = 0.0
        for zi, yi in zip(z, y, strict=True):
            q = _sigmoid(a * zi + b)
            ga += (q - yi) * zi
            gb += q - yi
            w = q * (1 - q)
            haa += w * zi * zi
            hab += w * zi
            hbb += w
        # A small ridge keeps the step finite when every row says the same.
        haa += 1e-9
        hbb += 1e-9
        det = haa * hbb - hab * hab
        if det <= 0:
            break
        da = (hbb * ga - hab * gb) / det
        db = (haa * gb - hab * ga) / det
        step = 1.0
        while step > 1e-8:
            trial = loss(a - step * da, b - step * db)
            if trial <= current:
                break
            step /= 2
        else:
            break
        a, b = a - step * da, b - step * db
        improved = current - trial
        current = trial
        if improved < 1e-12 * max(1.0, current):
            break
    return a, b


def fit(
    method: Method,
    probabilities: Sequence[Distribution],
    gold: Sequence[int],
    content_free: Distribution | None = None,
) -> Calibrator:
    """The calibrator of ``method`` fit on these rows (the batch-mean prior on their distributions alone;
    the content-free prior as given)."""
    rows = len(gold)
    if method == "identity":
        return Calibrator()
    if method == "temperature":
        return Calibrator("temperature", fit_temperature(probabilities, gold), rows=rows)
    if method == "platt":
        return Calibrator("platt", platt=fit_platt(probabilities, gold), rows=rows)
    if method in ("content_free", "content_free_temperature"):
        if content_free is None:
            raise ValueError(f"expected a content-free prior for method {method!r}, got none")
        given = tuple(content_free)
    else:
        given = mean_prior(probabilities)
    floor = prior_floor(len(given), len(probabilities))
    prior = tuple(max(q, floor) for q in given)
    if method in ("prior", "content_free"):
        return Calibrator(method, prior=prior)
    corrected = [divided(p, prior) for p in probabilities]
    return Calibrator(method, fit_temperature(corrected, gold), prior, rows=rows)


def fitted_nll(calibrator: Calibrator, probabilities: Sequence[Distribution], gold: Sequence[int]) -> float:
    return nll([calibrator.apply(p) for p in probabilities], gold)


def _softplus(x: float) -> float:
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))
