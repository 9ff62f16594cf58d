"""The guaranteed threshold (``--target-accuracy A --risk D``): the exact binomial tail and Clopper-Pearson
bound it tests with, the guarantee itself on a simulated calibrated population, and no threshold where
none meets the target."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest

from jevper.evaluate._guarantee import (
    CANDIDATES,
    binomial_tail,
    choose_threshold,
    guarantee,
    lower_bound,
    p_value,
)
from jevper.evaluate._metrics import selective


def exact_tail(k: int, n: int, p: Fraction) -> Fraction:
    """P[X >= k] for X ~ Binomial(n, p), by counting every outcome of n trials (no formula shared)."""
    total = Fraction(0)
    for outcome in itertools.product((0, 1), repeat=n):
        if sum(outcome) >= k:
            total += math.prod(p if x else 1 - p for x in outcome)
    return total


@pytest.mark.parametrize("n", [1, 2, 5, 9])
@pytest.mark.parametrize("p", [Fraction(1, 10), Fraction(1, 2), Fraction(9, 10), Fraction(97, 100)])
def test_the_binomial_tail_equals_the_sum_over_every_outcome(n: int, p: Fraction) -> None:
    for k in range(0, n + 2):
        assert binomial_tail(k, n, float(p)) == pytest.approx(
            float(exact_tail(k, n, p)), rel=1e-12, abs=1e-15
        )


def test_the_binomial_tail_far_out_keeps_its_precision_on_both_sides() -> None:
    # P[X >= 1000] of Binomial(1000, 0.9) is 0.9 ** 1000: a tail summed as 1 - the rest would give 0.
    assert binomial_tail(1000, 1000, 0.9) == pytest.approx(0.9**1000, rel=1e-9)
    # P[X >= 1] = 1 - 0.1 ** 50: summed from the short side (k below the mean).
    assert binomial_tail(1, 50, 0.9) == pytest.approx(1 - 0.1**50, rel=1e-15)
    assert (binomial_tail(0, 10, 0.3), binomial_tail(11, 10, 0.3)) == (1.0, 0.0)


def test_the_clopper_pearson_lower_bound_meets_known_values() -> None:
    # All of n right: the bound is risk ** (1 / n) (10 of 10 at 95 %: 0.7411).
    assert lower_bound(10, 10, 0.05) == pytest.approx(0.05**0.1, abs=1e-12)
    assert lower_bound(10, 10, 0.05) == pytest.approx(0.7411, abs=1e-4)
    # None right: 0. Otherwise the p at which the tail equals the risk.
    assert lower_bound(0, 10, 0.05) == 0.0
    for k, n, risk in [(9, 10, 0.05), (45, 50, 0.1), (180, 200, 0.01), (1, 3, 0.2)]:
        bound = lower_bound(k, n, risk)
        assert 0 < bound < k / n
        assert binomial_tail(k, n, bound) == pytest.approx(risk, rel=1e-6)
    # 9 of 10 at one-sided 95 %: 0.6058 (the beta distribution's 5 % quantile, Beta(9, 2)).
    assert lower_bound(9, 10, 0.05) == pytest.approx(0.6058, abs=1e-4)


def test_the_test_rejects_exactly_when_the_lower_bound_reaches_the_target() -> None:
    for k, n in [(95, 100), (92, 100), (290, 300), (40, 40), (21, 22)]:
        for target in (0.85, 0.9, 0.95):
            assert (p_value(k, n, target) <= 0.1) == (lower_bound(k, n, 0.1) >= target), (k, n, target)


def population(rng: random.Random, n: int, low: float = 0.5) -> tuple[list[float], list[bool]]:
    """A calibrated yes/no model: the top probability p uniform on [low, 1], the answer right with p."""
    tops = [rng.uniform(low, 1.0) for _ in range(n)]
    return tops, [rng.random() < p for p in tops]


def accuracy_above(threshold: float, low: float = 0.5) -> float:
    """The population's accuracy at or above a threshold: the mean of p over [max(t, low), 1]."""
    return (max(threshold, low) + 1.0) / 2


RESAMPLINGS = 400
ROWS = 500
TARGET, RISK = 0.9, 0.1
# Each resampling fails with probability at most RISK; over 400, the count of failures is at most
# Binomial(400, 0.1), of mean 40 and standard deviation 6: three deviations is the Monte-Carlo allowance.
ALLOWED_FAILURES = 40 + 3 * 6


def test_the_threshold_chosen_on_labelled_rows_holds_its_accuracy_on_fresh_rows_in_1_minus_d_of_samples() -> (
    None
):
    rng = random.Random(43)
    failures, chosen = 0, []
    for _ in range(RESAMPLINGS):
        found = choose_threshold(*population(rng, ROWS), TARGET, RISK)
        if found.threshold is None:
            continue
        chosen.append(found.threshold)
        # Fresh rows of the same population: their accuracy at or above the threshold, exactly.
        failures += accuracy_above(found.threshold) < TARGET
    assert failures <= ALLOWED_FAILURES, f"{failures} of {RESAMPLINGS} samples fell short of {TARGET}"
    # Not by refusing: most samples get a threshold, near the population's own (0.8, where (t + 1) / 2 = 0.9).
    assert len(chosen) >= 0.6 * RESAMPLINGS
    assert 0.8 <= sum(chosen) / len(chosen) <= 0.9


def test_the_plain_threshold_that_reaches_the_target_on_the_sample_breaks_the_guarantee() -> None:
    # What the simulation would see of a threshold without a guarantee: the selective figure's (the lowest
    # whose rows reach the target on the labelled sample) falls short on fresh rows about half the time.
    rng = random.Random(43)
    failures = 0
    for _ in range(RESAMPLINGS):
        tops, hits = population(rng, ROWS)
        reached = selective([(t, 1 - t) for t in tops], [0 if h else 1 for h in hits], TARGET).reached
        assert reached is not None
        failures += accuracy_above(reached.threshold) < TARGET
    assert failures > ALLOWED_FAILURES


def test_a_target_above_what_any_threshold_reaches_gives_no_threshold() -> None:
    # The population's best answers are right about 0.9 of the time; 0.97 is never shown.
    tops, hits = population(random.Random(1), 2000, low=0.5)
    tops = [0.5 + (t - 0.5) * 0.8 for t in tops]  # top probabilities 0.5 to 0.9, still right as often
    found = choose_threshold(tops, hits, 0.97, 0.1)
    assert (found.threshold, found.kept, found.lower_bound) == (None, 0, None)
    # A target of 1 is never shown by a sample, however right.
    assert choose_threshold([0.99] * 1000, [True] * 1000, 1.0, 0.1).threshold is None


def test_too_few_rows_give_no_threshold_and_enough_right_ones_give_one() -> None:
    # 60 answers, even all right, do not start the sequence: right 0.95 of the time they would not show 0.9.
    assert choose_threshold([0.99] * 60, [True] * 60, 0.9, 0.1).threshold is None
    found = choose_threshold([0.99] * 100 + [0.6] * 100, [True] * 100 + [False] * 100, 0.9, 0.1)
    assert (found.threshold, found.kept, found.right) == (0.61, 100, 100)
    assert found.lower_bound == pytest.approx(0.1 ** (1 / 100))


def test_the_sequence_stops_at_the_first_threshold_it_cannot_show() -> None:
    # 100 sure, right answers; then 100 at 0.7, all wrong; then 400 at 0.5, all right: the rows at or above
    # 0.5 are right 500 of 600 times (0.83), below 0.9, so the sequence stops at 0.70 and never reaches 0.5.
    tops = [0.95] * 100 + [0.7] * 100 + [0.5] * 400
    hits = [True] * 100 + [False] * 100 + [True] * 400
    found = choose_threshold(tops, hits, 0.9, 0.1)
    assert (found.threshold, found.kept) == (0.71, 100)
    assert CANDIDATES[0] == 1.0 and CANDIDATES[-1] == 0.0 and len(CANDIDATES) == 101


def test_per_label_thresholds_are_chosen_on_the_answers_whose_top_option_is_the_label() -> None:
    rng = random.Random(5)
    # "a" answers are calibrated; "b" answers are right half the time whatever they say.
    rows = []
    for _ in range(1500):
        p = rng.uniform(0.5, 1.0)
        rows.append(((p, 1 - p), 0 if rng.random() < p else 1))
        rows.append(((1 - p, p), 1 if rng.random() < 0.5 else 0))
    found = guarantee(
        ("a", "b"), [p for p, _ in rows], [g for _, g in rows], 0.9, 0.1, on="test", per_label=True
    )
    assert found.labels is not None
    assert found.labels["a"].threshold is not None and found.labels["a"].threshold < 0.9
    assert found.labels["b"].threshold is None
    assert found.labels["a"].rows == found.labels["b"].rows == 1500
    assert found.question.rows == 3000
    as_json = found.to_json()
    assert as_json["per_label"]["b"]["threshold"] is None and "Learn-then-Test" in as_json["method"]


def test_a_target_or_risk_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"risk: expected a probability in \(0, 1\), got 1.5"):
        choose_threshold([0.9], [True], 0.9, 1.5)
    with pytest.raises(ValueError, match=r"target: expected an accuracy in \(0, 1\], got 0"):
        choose_threshold([0.9], [True], 0, 0.1)
