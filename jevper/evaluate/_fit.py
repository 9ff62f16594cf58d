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
- ``beta`` (a yes/no question): ``sigmoid(a * ln p_true - b * ln(1 - p_true) + c)``, fit as ``platt``
  is (beta calibration; Platt's map is its case a = b);
- ``identity``: the distribution as it came;
- any of these with ``+top``: then Platt scaling of the top label's probability (``fit_top``: a and b
  fit, as ``platt``'s, to whether the top answer was right), the others sharing the rest. A map fit by
  NLL over every option can leave the top answer right more often than it says (seen on
  Qwen2.5-Coder-1.5B: scripts/bench calibration); this step fits that one figure.

The maps fit to labels (those with a temperature, and Platt) keep the number of rows, which bounds what
they say (``jevper.calibration.bounded``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from jevper.calibration import METHODS, Calibrator, Distribution, Method, beta_terms, divided, tempered
from jevper.calibration import logit as _logit
from jevper.calibration import sigmoid as _sigmoid
from jevper.evaluate._metrics import FLOOR, nll, predicted

__all__ = [
    "METHODS",
    "TOP",
    "T_RANGE",
    "Calibrator",
    "Method",
    "divided",
    "fit",
    "fit_beta",
    "fit_platt",
    "fit_temperature",
    "fit_top",
    "fitted_nll",
    "mean_prior",
    "prior_floor",
    "tempered",
]

#: The temperature is searched between these: below 0.25 (log-odds sharpened more than fourfold) the fit
#: is chasing rows a threshold separates, not calibrating; above 50 the answer is all but uniform.
T_RANGE = (0.25, 50.0)
#: The suffix of a candidate whose method's map is followed by the top-label map ("prior_temperature+top").
TOP = "+top"
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
    """a and b minimising the NLL of sigmoid(a * logit(p_true) + b), where option 0 is true, against
    Platt's targets: (N+ + 1) / (N+ + 2) for a true row, 1 / (N- + 2) for a false one, so the loss has a
    finite minimum even when a threshold separates the rows (with 0 and 1 the slope grows without end)."""
    rows = [[_logit(p[0]), 1.0] for p in probabilities]
    a, b = _logistic(rows, _platt_targets(gold), (1.0, 0.0))
    return a, b


def fit_beta(probabilities: Sequence[Distribution], gold: Sequence[int]) -> tuple[float, float, float]:
    """a, b and c minimising the NLL of sigmoid(a * ln p_true - b * ln(1 - p_true) + c), against Platt's
    targets as ``fit_platt``; it starts from the identity (a = b = 1, c = 0)."""
    rows = [[*beta_terms(p), 1.0] for p in probabilities]
    a, b, c = _logistic(rows, _platt_targets(gold), (1.0, 1.0, 0.0))
    return a, b, c


def _platt_targets(gold: Sequence[int]) -> list[float]:
    positives = sum(1 for g in gold if g == 0)
    negatives = len(gold) - positives
    yes, no = (positives + 1) / (positives + 2), 1 / (negatives + 2)
    return [yes if g == 0 else no for g in gold]


def _logistic(rows: Sequence[Sequence[float]], y: Sequence[float], start: Sequence[float]) -> list[float]:
    """The weights w minimising sum(softplus(w . x) - y * (w . x)) over the rows x: Newton's method, each
    step halved until the loss falls (a tiny ridge keeps a step finite when every row says the same)."""
    w = list(start)
    d = len(w)

    def loss(weights: Sequence[float]) -> float:
        total = 0.0
        for x, yi in zip(rows, y, strict=True):
            z = sum(wk * xk for wk, xk in zip(weights, x, strict=True))
            total += _softplus(z) - yi * z
        return total

    current = loss(w)
    for _ in range(100):
        grad = [0.0] * d
        hess = [[0.0] * d for _ in range(d)]
        for x, yi in zip(rows, y, strict=True):
            q = _sigmoid(sum(wk * xk for wk, xk in zip(w, x, strict=True)))
            weight = q * (1 - q)
            for i in range(d):
                grad[i] += (q - yi) * x[i]
                for j in range(d):
                    hess[i][j] += weight * x[i] * x[j]
        for i in range(d):
            hess[i][i] += 1e-9
        direction = _solved(hess, grad)
        if direction is None:
            break
        step = 1.0
        while step > 1e-8:
            trial_w = [wk - step * dk for wk, dk in zip(w, direction, strict=True)]
            trial = loss(trial_w)
            if trial <= current:
                break
            step /= 2
        else:
            break
        w = trial_w
        improved = current - trial
        current = trial
        if improved < 1e-12 * max(1.0, current):
            break
    return w


def _solved(matrix: Sequence[Sequence[float]], vector: Sequence[float]) -> list[float] | None:
    """x with matrix @ x = vector (Gaussian elimination with partial pivoting); None if singular."""
    n = len(vector)
    a = [[*row, v] for row, v in zip(matrix, vector, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-300:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            factor = a[r][col] / a[col][col]
            for c in range(col, n + 1):
                a[r][c] -= factor * a[col][c]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (a[r][n] - sum(a[r][c] * x[c] for c in range(r + 1, n))) / a[r][r]
    return x


def fit_top(probabilities: Sequence[Distribution], gold: Sequence[int]) -> tuple[float, float]:
    """a and b of Platt scaling for the top label: its probability against whether it was the gold
    option, fit as ``fit_platt`` fits a yes/no question's."""
    tops = [max(p) for p in probabilities]
    # As a yes/no question: option 0, "the top answer is right", is the gold one when it was.
    said = [0 if predicted(p) == g else 1 for p, g in zip(probabilities, gold, strict=True)]
    return fit_platt([(c, 1.0 - c) for c in tops], said)


def fit(
    candidate: str,
    probabilities: Sequence[Distribution],
    gold: Sequence[int],
    content_free: Distribution | None = None,
) -> Calibrator:
    """The calibrator of ``candidate`` (a method, ``+top`` after it for the top-label map) fit on these
    rows (the batch-mean prior on their distributions alone; the content-free prior as given)."""
    if candidate.endswith(TOP):
        base = fit(candidate.removesuffix(TOP), probabilities, gold, content_free)
        mapped = [base.apply(p) for p in probabilities]
        return replace(base, top=fit_top(mapped, gold), rows=len(gold))
    method: Method = _method(candidate)
    rows = len(gold)
    if method == "identity":
        return Calibrator()
    if method == "temperature":
        return Calibrator("temperature", fit_temperature(probabilities, gold), rows=rows)
    if method == "platt":
        return Calibrator("platt", platt=fit_platt(probabilities, gold), rows=rows)
    if method == "beta":
        return Calibrator("beta", beta=fit_beta(probabilities, gold), rows=rows)
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


def _method(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"expected a calibration method, one of {list(METHODS)}, got {name!r}")
    return name


def fitted_nll(calibrator: Calibrator, probabilities: Sequence[Distribution], gold: Sequence[int]) -> float:
    return nll([calibrator.apply(p) for p in probabilities], gold)


def _softplus(x: float) -> float:
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))
