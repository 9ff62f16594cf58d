"""Every metric against scikit-learn's (or a formula computed apart) on fixed, seeded arrays.

scikit-learn is imported by the tests that compare with it, not by the module: importing it costs about a
second, which each of the offline suite's workers paid while collecting, most of them for no test here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from jevper.evaluate import accuracy, brier, expected_level_mae, nll, reliability, selective

# 302 rows: (n - 1) * i / 15 is a whole number for no inner edge i, so no quantile edge is a row's confidence.
ROWS = 302


def rows(classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Distributions sharper or flatter at random, and gold options drawn from them (so neither
    calibrated nor hopeless)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(ROWS, classes)) * rng.uniform(0.3, 4.0, size=(ROWS, 1))
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    squashed = p**0.6 / (p**0.6).sum(axis=1, keepdims=True)
    gold = np.array([rng.choice(classes, p=row) for row in squashed])
    return p, gold


def as_lists(p: np.ndarray, gold: np.ndarray) -> tuple[list[tuple[float, ...]], list[int]]:
    return [tuple(float(x) for x in row) for row in p], [int(g) for g in gold]


CASES = [(2, 1), (4, 2), (4, 3), (7, 4)]


def ece_by_sklearn(p: np.ndarray, gold: np.ndarray, strategy: str) -> tuple[float, list[int]]:
    """The top-label ECE from sklearn's calibration_curve, the bin counts found the way it finds them."""
    from sklearn.calibration import calibration_curve

    confidence = p.max(axis=1)
    hit = (p.argmax(axis=1) == gold).astype(int)
    prob_true, prob_pred = calibration_curve(hit, confidence, n_bins=15, strategy=strategy)
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, 16)
    else:
        edges = np.percentile(confidence, np.linspace(0, 1, 16) * 100)
    counts = np.bincount(np.searchsorted(edges[1:-1], confidence), minlength=15)
    nonzero = counts[counts > 0]
    return float(np.sum(nonzero / len(hit) * np.abs(prob_true - prob_pred))), [int(c) for c in nonzero]


@pytest.mark.parametrize(("classes", "seed"), CASES)
def test_accuracy_brier_and_nll_match_scikit_learn(classes: int, seed: int) -> None:
    from sklearn.metrics import accuracy_score, brier_score_loss, log_loss

    p, gold = rows(classes, seed)
    probabilities, golds = as_lists(p, gold)
    labels = list(range(classes))
    assert accuracy(probabilities, golds) == pytest.approx(accuracy_score(gold, p.argmax(axis=1)))
    assert nll(probabilities, golds) == pytest.approx(log_loss(gold, p, labels=labels), rel=1e-9)
    expected_brier = (
        2 * brier_score_loss(gold == 0, p[:, 0])
        if classes == 2
        else brier_score_loss(gold, p, labels=labels, scale_by_half=False)
    )
    assert brier(probabilities, golds) == pytest.approx(expected_brier, rel=1e-9)


def test_the_multi_class_brier_score_is_the_sum_over_options_of_one_vs_rest_scores() -> None:
    from sklearn.metrics import brier_score_loss

    p, gold = rows(4, 5)
    probabilities, golds = as_lists(p, gold)
    one_vs_rest = sum(brier_score_loss(gold == k, p[:, k]) for k in range(4))
    assert brier(probabilities, golds) == pytest.approx(one_vs_rest, rel=1e-9)


@pytest.mark.parametrize(("classes", "seed"), CASES)
@pytest.mark.parametrize(("binning", "strategy"), [("equal_width", "uniform"), ("equal_mass", "quantile")])
def test_the_top_label_ece_matches_scikit_learns_calibration_curve(
    classes: int, seed: int, binning: str, strategy: str
) -> None:
    p, gold = rows(classes, seed)
    found = reliability(*as_lists(p, gold), binning)  # type: ignore[arg-type]
    expected, counts = ece_by_sklearn(p, gold, strategy)
    assert found.ece == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert [b.count for b in found.bins if b.count] == counts
    assert len(found.bins) == 15 and found.binning == binning


def test_the_reliability_bins_hold_each_rows_confidence_and_hit() -> None:
    probabilities = [(0.95, 0.05), (0.9, 0.1), (0.56, 0.44), (0.18, 0.82), (0.58, 0.42)]
    gold = [0, 1, 0, 1, 1]
    found = reliability(probabilities, gold)
    # 0.56 and 0.58 share the bin (8/15, 9/15]; 0.82, 0.9 and 0.95 each have one of their own.
    full = [(i, b.count, b.accuracy) for i, b in enumerate(found.bins) if b.count]
    assert full == [(8, 2, 0.5), (12, 1, 1.0), (13, 1, 0.0), (14, 1, 1.0)]
    expected = (abs(1 - (0.56 + 0.58)) + abs(1 - 0.82) + abs(0 - 0.9) + abs(1 - 0.95)) / 5
    assert found.ece == pytest.approx(expected)


def test_the_expected_level_error_is_the_distance_of_the_mean_level_from_gold() -> None:
    probabilities = [(0.5, 0.5, 0.0, 0.0), (0.0, 0.0, 0.25, 0.75), (0.25, 0.25, 0.25, 0.25)]
    gold = [0, 1, 3]
    assert expected_level_mae(probabilities, gold) == pytest.approx((0.5 + 1.75 + 1.5) / 3)


def test_nll_floors_a_gold_option_given_no_mass_instead_of_infinity() -> None:
    assert nll([(1.0, 0.0)], [1]) == pytest.approx(-math.log(1e-12))


def test_selective_accuracy_keeps_the_rows_at_or_above_each_threshold() -> None:
    probabilities = [(0.9, 0.1), (0.8, 0.2), (0.7, 0.3), (0.6, 0.4), (0.55, 0.45)]
    gold = [0, 0, 1, 0, 1]
    found = selective(probabilities, gold, target=0.75)
    by_threshold = {round(p.threshold, 2): p for p in found.curve}
    assert by_threshold[0.0].coverage == 1.0 and by_threshold[0.0].accuracy == pytest.approx(0.6)
    assert by_threshold[0.7].coverage == pytest.approx(0.6)
    assert by_threshold[0.7].accuracy == pytest.approx(2 / 3)
    assert by_threshold[0.95].coverage == 0.0 and by_threshold[0.95].accuracy is None
    # 0.8 keeps the two right ones; 0.6 keeps four of which three are right (0.75): the smallest.
    assert found.reached is not None
    assert (found.reached.threshold, found.reached.coverage, found.reached.accuracy) == (0.6, 0.8, 0.75)


def test_selective_accuracy_says_when_no_threshold_reaches_the_target() -> None:
    assert selective([(0.9, 0.1), (0.8, 0.2)], [1, 1], target=0.5).reached is None


def test_selective_accuracy_agrees_with_a_direct_count_on_random_rows() -> None:
    p, gold = rows(4, 6)
    probabilities, golds = as_lists(p, gold)
    found = selective(probabilities, golds, target=0.8)
    confidence, hit = p.max(axis=1), p.argmax(axis=1) == gold
    for point in found.curve:
        kept = confidence >= point.threshold
        assert point.coverage == pytest.approx(kept.mean())
        if kept.any():
            assert point.accuracy == pytest.approx(hit[kept].mean())
    reaching = [t for t in sorted(set(confidence)) if hit[confidence >= t].mean() >= 0.8]
    assert found.reached is not None and found.reached.threshold == reaching[0]
