"""The flags the gateway and the batch engine share: one parser each, the same refusals."""

from __future__ import annotations

import argparse
import os

import pytest

from jevper.batch.cli import parser as batch_parser
from jevper.serve.cli import parser as gateway_parser
from jevper.servers.flags import json_object
from jevper.servers.llamacpp import PROMPT_CACHE_MIB, SLOT_CONTEXT, slot_args

BATCH_REQUIRED = ["in.parquet", "out.parquet", "--questions", "q.json"]


@pytest.mark.parametrize(
    ("text", "named"),
    [("[1]", "got list"), ("3", "got int"), ("{", "got '{'"), ('"x"', "got str")],
)
def test_an_extra_body_not_a_json_object_is_refused_naming_what_arrived(text: str, named: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected a JSON object") as raised:
        json_object(text)
    assert named in str(raised.value)


@pytest.mark.parametrize(
    ("make", "before"), [(gateway_parser, []), (batch_parser, BATCH_REQUIRED)], ids=["gateway", "batch"]
)
def test_both_command_lines_take_an_extra_body_object_and_refuse_a_list(
    make: object, before: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert callable(make)
    assert make().parse_args([*before, "--extra-body", '{"seed": 1}']).extra_body == {"seed": 1}
    with pytest.raises(SystemExit) as exited:
        make().parse_args([*before, "--extra-body", "[1]"])
    assert exited.value.code == 2
    assert "expected a JSON object, got list" in capsys.readouterr().err


def test_each_slot_of_a_spawned_server_holds_the_same_context() -> None:
    args = slot_args(3)
    assert args[args.index("--ctx-size") + 1] == str(3 * SLOT_CONTEXT)
    assert args[args.index("-np") + 1] == "3"
    assert "--jinja" in args


def test_a_spawned_server_bounds_its_prompt_cache_and_the_wrapper_passes_the_bound_on() -> None:
    import xllamacpp

    from jevper.servers.xllamacpp_server import params_of, parser

    args = slot_args(2)
    assert args[args.index("--cache-ram") + 1] == str(PROMPT_CACHE_MIB)
    given = parser().parse_args(["-m", "model.gguf", "--port", "8080", *args])
    assert params_of(given, xllamacpp).cache_ram_mib == PROMPT_CACHE_MIB
    # Without the flag, llama.cpp's own default stands (8,192 MiB in b11549).
    plain = parser().parse_args(["-m", "model.gguf", "--port", "8080"])
    assert params_of(plain, xllamacpp).cache_ram_mib == xllamacpp.CommonParams().cache_ram_mib


def test_the_wrapper_sets_the_key_it_is_given_and_leaves_the_callers_environment_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import xllamacpp

    from jevper.servers.xllamacpp_server import API_KEY_ENV, params_of, parser

    monkeypatch.setenv(API_KEY_ENV, "sk-in-the-environment")
    given = parser().parse_args(["-m", "model.gguf", "--port", "8080"])
    assert list(params_of(given, xllamacpp, "sk-given").api_keys) == ["sk-given"]
    assert list(params_of(given, xllamacpp).api_keys) == []
    assert os.environ[API_KEY_ENV] == "sk-in-the-environment"
