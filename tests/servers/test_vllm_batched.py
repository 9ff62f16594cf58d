"""The vLLM spawner's --vllm-max-num-seqs: the recipe with vLLM batching up to N requests, a recording of
its own (its release named <release>-batched by the spawner)."""

from __future__ import annotations

import argparse

import pytest

from jevper.servers.vllm import BATCHED, RECIPE_ARGS, SPAWNER, recipe_args


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    SPAWNER.add_arguments(parser.add_argument_group("vllm"))
    return parser.parse_args(list(argv))


def test_the_recipe_runs_one_sequence_and_the_batched_run_changes_that_alone() -> None:
    assert recipe_args() == RECIPE_ARGS
    at = RECIPE_ARGS.index("--max-num-seqs")
    assert RECIPE_ARGS[at + 1] == "1"
    batched = recipe_args(4)
    assert batched[at + 1] == "4"
    assert [a for i, a in enumerate(batched) if i != at + 1] == [
        a for i, a in enumerate(RECIPE_ARGS) if i != at + 1
    ]
    assert BATCHED == "-batched"


def test_the_command_line_takes_a_whole_number_of_sequences_of_one_or_more() -> None:
    assert parsed().vllm_max_num_seqs == 1
    assert parsed("--vllm-max-num-seqs", "4").vllm_max_num_seqs == 4
    for wrong in ("0", "-2", "four"):
        with pytest.raises(SystemExit):
            parsed("--vllm-max-num-seqs", wrong)
