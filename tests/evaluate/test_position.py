"""Position bias from the same rows asked with the options in other orders."""

from __future__ import annotations

import pytest

from jevper.evaluate import Asked, position_bias, rotated
from jevper.evaluate._position import chosen

ORDER = ("a", "b", "c")


def turned(by: int) -> tuple[str, ...]:
    return tuple(rotated(dict.fromkeys(ORDER), by))


def test_a_model_that_always_picks_the_first_position_changes_its_answer_under_every_rotation() -> None:
    rows = {str(i): [Asked(turned(by), turned(by)[0]) for by in range(3)] for i in range(4)}
    bias = position_bias(rows)
    assert bias is not None
    assert (bias.rows, bias.rotated_answers, bias.changed, bias.rows_changed) == (4, 8, 1.0, 1.0)
    assert bias.by_position == (1.0, 0.0, 0.0)


def test_a_model_that_follows_the_content_is_even_across_positions_and_never_changes() -> None:
    rows = {option: [Asked(turned(by), option) for by in range(3)] for option in ORDER}
    bias = position_bias(rows)
    assert bias is not None
    assert (bias.changed, bias.rows_changed) == (0.0, 0.0)
    assert bias.by_position == pytest.approx((1 / 3, 1 / 3, 1 / 3))


def test_the_share_changed_counts_answers_and_the_rows_changed_counts_rows() -> None:
    rows = {
        "x": [Asked(turned(0), "a"), Asked(turned(1), "a"), Asked(turned(2), "c")],
        "y": [Asked(turned(0), "b"), Asked(turned(1), "b"), Asked(turned(2), "b")],
        "z": [Asked(turned(0), "c")],  # asked once: left out
    }
    bias = position_bias(rows)
    assert bias is not None
    assert (bias.rows, bias.rotated_answers, bias.changed, bias.rows_changed) == (2, 4, 0.25, 0.5)


def test_rows_asked_in_one_order_only_give_no_position_bias() -> None:
    assert position_bias({"x": [Asked(ORDER, "a")]}) is None


def test_rotating_puts_the_option_at_that_place_first() -> None:
    assert list(rotated({"a": 1, "b": 2, "c": 3}, 1)) == ["b", "c", "a"]
    assert list(rotated({"a": 1, "b": 2, "c": 3}, 4)) == ["b", "c", "a"]


def test_the_prior_correction_picks_against_the_orders_own_lean() -> None:
    # Every row leans to the first position; the second row leans to it less than the rest.
    rows = {"x": (0.7, 0.2, 0.1), "y": (0.5, 0.4, 0.1), "z": (0.7, 0.1, 0.2)}
    assert {rid: a.chosen for rid, a in chosen(ORDER, rows).items()} == {"x": "a", "y": "a", "z": "a"}
    corrected = chosen(ORDER, rows, corrected=True)
    assert {rid: a.chosen for rid, a in corrected.items()} == {"x": "a", "y": "b", "z": "c"}
