"""Properties of the step from the model's own numbers to an answer, over generated inputs."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jevper import Choice, ChoiceAnswer, MalformedAnswerError, Score, ScoreAnswer
from jevper._ask import ask
from jevper._distribution import clamped, make_answer, renormalised, rescaled
from jevper._readout import anchored_index, read_labels
from jevper._wire import TokenLogprob, WireResult, WireUsage

weights = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(st.lists(weights, min_size=2, max_size=10).filter(lambda ws: sum(ws) > 0))
def test_a_score_lies_within_its_levels_and_its_probabilities_sum_to_one(raw_weights: list[float]) -> None:
    score = Score([f"level {i}" for i in range(len(raw_weights))])
    raw = dict(zip(score.options, raw_weights, strict=True))
    answer = make_answer(score, raw, normalize=True, method="structured", surface="x", reasoning=None)
    assert isinstance(answer, ScoreAnswer)
    assert math.isclose(sum(answer.probabilities.values()), 1.0, rel_tol=1e-9)
    assert -1e-9 <= answer.score <= len(raw_weights) - 1 + 1e-9
    assert -1e-9 <= answer.confidence <= 1.0 + 1e-9


@given(
    st.lists(st.floats(min_value=-30.0, max_value=0.0), min_size=2, max_size=20),
    st.integers(min_value=Choice.MIN_OPTIONS, max_value=26),
)
def test_a_label_readout_spreads_all_its_mass_over_exactly_the_options(
    logprobs: list[float], width: int
) -> None:
    question = Choice(criteria={f"option {i}": "x" for i in range(width)})
    a = ask(question, "label")
    labels = [*a.labels, "The", "I", "You"]
    top = tuple((labels[i % len(labels)] + " " * (i // len(labels)), lp) for i, lp in enumerate(logprobs))
    first = TokenLogprob("A", top[0][1] if top[0][0] == "A" else -1.0, top)
    result = WireResult(
        "chat_completions",
        "A",
        None,
        None,
        (first,),
        "stop",
        None,
        1,
        (),
        WireUsage(None, None, None, None),
        {},
    )
    raw = read_labels(result, a)
    assert tuple(raw) == question.options
    answer = make_answer(question, raw, normalize=True, method="logprobs", surface="x", reasoning=None)
    assert isinstance(answer, ChoiceAnswer)
    assert math.isclose(sum(answer.probabilities.values()), 1.0, rel_tol=1e-9)
    assert answer.choice in question.options


@given(
    st.lists(st.sampled_from(["a", "b", " ", "c", "<|im_end|>", ""]), max_size=8),
    st.sampled_from(["B", "AB", "B."]),
)
def test_the_tail_anchor_points_at_a_token_that_starts_the_answer(prefix: list[str], answer: str) -> None:
    pieces = [*prefix, *answer, "<|im_end|>"]
    tokens = tuple(TokenLogprob(p, -0.1, ()) for p in pieces)
    index = anchored_index(tokens, answer)
    assert index is not None
    assert "".join(t.token for t in tokens[index:]).strip().startswith(answer)


@given(st.lists(weights, min_size=1, max_size=10).filter(lambda ws: sum(ws) > 0))
def test_renormalised_weights_sum_to_one_in_their_order_and_keep_their_ratios(
    raw_weights: list[float],
) -> None:
    p = renormalised(raw_weights)
    assert math.isclose(sum(p), 1.0, rel_tol=1e-9)
    top = max(range(len(raw_weights)), key=raw_weights.__getitem__)
    # The top weight stays a top probability; two weights a rounding apart may become equal
    # (999999.9999999999 and 1000000.0 among three), so the first of the largest may be another.
    assert p[top] == max(p)
    assert all(0.0 <= x <= 1.0 for x in p)


@pytest.mark.parametrize("values", [[0.5, -0.1], [0.5, math.nan], [0.5, math.inf], [0.0, 0.0], []], ids=str)
def test_what_is_no_distribution_is_never_renormalised_into_one(values: list[float]) -> None:
    # The one renormalising refuses, each caller in its own words: no mass is not a uniform answer.
    with pytest.raises(ValueError, match=r"^expected "):
        renormalised(values)
    with pytest.raises(MalformedAnswerError, match="expected some probability mass on the options"):
        rescaled({str(i): v for i, v in enumerate(values)})


def test_clamped_holds_a_value_within_its_bounds() -> None:
    assert (clamped(-0.2), clamped(1.3), clamped(0.4)) == (0.0, 1.0, 0.4)
    assert clamped(0.0, 1e-12, 1 - 1e-12) == 1e-12
