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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from itertools import repeat, zip_longest
from operator import add, mul, neg, sub

from jevper.calibration import METHODS, Calibrator, Distribution, Method, beta_terms, divided, tempered
from jevper.calibration import logit as _logit
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
    "fit_each",
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
    loss = _tempered_nll(probabilities, gold)
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


def _tempered_nll(probabilities: Sequence[Distribution], gold: Sequence[int]) -> Callable[[float], float]:
    """The NLL of softmax(log p / T) over the rows, as a function of log T. The logarithms are taken once:
    with m a row's top log and d_k = log p_k - m for its other options, a row costs
    ``log1p(sum_k exp(d_k / T)) + (m - log p_gold) / T`` (its top's term is exp(0) = 1), and the second
    terms sum to one figure over the rows. The search calls this some 25 times a fit, so each call runs
    down columns (one per option but the top) in the interpreter's C loops, not row by row."""
    gaps: list[float] = []
    lifts: list[list[float]] = []
    for p, g in zip(probabilities, gold, strict=True):
        logs = [math.log(max(x, FLOOR)) for x in p]
        top = max(logs)
        at = logs.index(top)
        lifts.append([x - top for i, x in enumerate(logs) if i != at])
        gaps.append(top - logs[g])
    # A row with fewer options than another is padded with exp(-inf) = 0.
    columns = [list(c) for c in zip_longest(*lifts, fillvalue=-math.inf)]
    spread = math.fsum(gaps)
    exp, log1p = math.exp, math.log1p

    def loss(log_t: float) -> float:
        inverse = math.exp(-log_t)
        if not columns:
            return inverse * spread
        sums: Iterable[float] = map(exp, map(inverse.__mul__, columns[0]))
        for column in columns[1:]:
            sums = map(add, sums, map(exp, map(inverse.__mul__, column)))
        return sum(map(log1p, sums), 0.0) + inverse * spread

    return loss


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
    step halved until the loss falls (a tiny ridge keeps a step finite when every row says the same).

    Each weight's column of x is kept as a list, so a pass over the rows is a few of the interpreter's C
    loops: the loss at a trial point keeps each row's w . x and exp(-|w . x|), and the gradient and
    Hessian at the point taken are made from them, not from a second pass."""
    w = [float(x) for x in start]
    ys = list(y)
    if len(rows) != len(ys):
        raise ValueError(f"expected a target per row, got {len(ys)} targets for {len(rows)} rows")
    columns = [[x[i] for x in rows] for i in range(len(w))]
    current, zs, es = _logistic_loss(columns, ys, w)
    for _ in range(100):
        # The sigmoid q of each row, as jevper.calibration.sigmoid gives it, from exp(-|z|).
        qs = [(1.0 if z >= 0 else e) / (1.0 + e) for z, e in zip(zs, es, strict=True)]
        residuals = list(map(sub, qs, ys))
        weights = [q * (1.0 - q) for q in qs]
        grad = [sum(map(mul, residuals, column)) for column in columns]
        hess = []
        for i, column in enumerate(columns):
            weighed = list(map(mul, weights, column))
            hess.append([sum(map(mul, weighed, other)) for other in columns])
            hess[i][i] += 1e-9
        direction = _solved(hess, grad)
        if direction is None:
            break
        step = 1.0
        while step > 1e-8:
            trial_w = [wk - step * dk for wk, dk in zip(w, direction, strict=True)]
            trial, trial_zs, trial_es = _logistic_loss(columns, ys, trial_w)
            if trial <= current:
                break
            step /= 2
        else:
            break
        w, zs, es = trial_w, trial_zs, trial_es
        improved = current - trial
        current = trial
        if improved < 1e-12 * max(1.0, current):
            break
    return w


def _logistic_loss(
    columns: Sequence[Sequence[float]], ys: Sequence[float], w: Sequence[float]
) -> tuple[float, list[float], list[float]]:
    """sum(softplus(z) - y * z) over the rows, with z = w . x; and each row's z and exp(-|z|)."""
    terms: Iterable[float] = map(w[0].__mul__, columns[0])
    for wk, column in zip(w[1:], columns[1:], strict=True):
        terms = map(add, terms, map(wk.__mul__, column))
    zs = list(terms)
    es = list(map(math.exp, map(neg, map(abs, zs))))
    # softplus(z) = max(z, 0) + log1p(exp(-|z|))
    softplus = map(add, map(max, zs, repeat(0.0)), map(math.log1p, es))
    return sum(map(sub, softplus, map(mul, ys, zs)), 0.0), zs, es


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
    return fit_each((candidate,), probabilities, gold, content_free)[0]


def fit_each(
    candidates: Sequence[str],
    probabilities: Sequence[Distribution],
    gold: Sequence[int],
    content_free: Distribution | None = None,
) -> list[Calibrator]:
    """``fit`` of each candidate on the same rows, each map fit once: a method and the same method with
    ``+top`` share the method's map, which the top-label step is then fit on."""
    fitted: dict[str, Calibrator] = {}

    def one(candidate: str) -> Calibrator:
        if candidate not in fitted:
            if candidate.endswith(TOP):
                base = one(candidate.removesuffix(TOP))
                mapped = [base.apply(p) for p in probabilities]
                fitted[candidate] = replace(base, top=fit_top(mapped, gold), rows=len(gold))
            else:
                fitted[candidate] = _fit_method(_method(candidate), probabilities, gold, content_free)
        return fitted[candidate]

    return [one(c) for c in candidates]


def _fit_method(
    method: Method,
    probabilities: Sequence[Distribution],
    gold: Sequence[int],
    content_free: Distribution | None,
) -> Calibrator:
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
