"""The llama.cpp spawner's --llamacpp-slots: the recipe (one slot) or ``slot_args`` for N slots, decoded
side by side, a recording of its own (its release named <release>-Nslots by the spawner)."""

from __future__ import annotations

import argparse

import pytest

from jevper.servers.llamacpp import RECIPE_ARGS, SPAWNER, named_for_slots, recipe_args, slot_args, slots_of


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    SPAWNER.add_arguments(parser.add_argument_group("llamacpp"))
    return parser.parse_args(list(argv))


def test_one_slot_is_the_recipe_and_more_are_the_one_recipe_for_n_slots() -> None:
    assert recipe_args() == RECIPE_ARGS
    assert recipe_args(1) == RECIPE_ARGS
    assert recipe_args(2) == slot_args(2)
    with pytest.raises(ValueError, match="expected 1 or more, got 0"):
        recipe_args(0)


def test_the_slot_count_is_read_from_the_server_arguments() -> None:
    assert slots_of(RECIPE_ARGS) == 1
    assert slots_of(recipe_args(2)) == 2
    assert slots_of(slot_args(4)) == 4
    assert slots_of(("--ctx-size", "4096", "--jinja")) == 1
    assert slots_of(("--parallel", "3")) == 3


def test_a_recording_of_n_slots_is_named_by_its_count() -> None:
    assert named_for_slots("b11549", 1) == "b11549"
    assert named_for_slots("b11549", 2) == "b11549-2slots"
    assert named_for_slots("b11434", 4) == "b11434-4slots"


def test_the_command_line_takes_a_whole_number_of_slots_of_one_or_more() -> None:
    assert parsed().llamacpp_slots == 1
    assert parsed("--llamacpp-slots", "2").llamacpp_slots == 2
    for wrong in ("0", "-2", "two"):
        with pytest.raises(SystemExit):
            parsed("--llamacpp-slots", wrong)
