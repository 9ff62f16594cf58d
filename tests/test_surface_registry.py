"""A surface is one record: each `jevper/_wire/<surface>.py` declares it, `jevper._wire.RECORDS` holds them
all, and nothing outside the wire format spells a surface's name."""

from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
import typing
from pathlib import Path

import pytest
from _source import nodes

from jevper import _wire, models
from jevper._wire import (
    PROMPT_RECORDS,
    PROMPT_SURFACES,
    RECORDS,
    SURFACES,
    NativeSurfaceRecord,
    PromptSurfaceRecord,
    SchemaFormat,
    Turn,
    WireRequest,
)
from jevper.serve.cli import parser
from jevper.servers.gateway import SPAWNER

PACKAGE = Path(_wire.__file__).resolve().parents[1]
NAMES = frozenset(SURFACES)
#: Where a surface's name may still be spelled outside jevper/_wire, and why: (module, name) -> count.
ALLOWED = {
    # The --check request of the vLLM launcher is a Chat Completions body; "messages" is its field.
    ("jevper/servers/vllm.py", "messages"): 1,
    # The batch's dry run hands llama.cpp's /apply-template a request's chat turns, its "messages" field.
    ("jevper/batch/_dry.py", "messages"): 1,
}


def spelled_names(path: Path) -> list[tuple[str, int]]:
    """Every string constant (docstrings aside) that is a surface's name or quotes one (``api='messages'``),
    with its line."""
    docstrings = {
        id(node.body[0].value)
        for node in nodes(path)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in nodes(path):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
            continue
        for name in NAMES:
            if node.value == name or f"'{name}'" in node.value or f'"{name}"' in node.value:
                found.append((name, node.lineno))
    return found


def spellings_outside_the_wire() -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE.parent).as_posix()
        if module.startswith("jevper/_wire/"):
            continue
        for name, _line in spelled_names(path):
            counts[(module, name)] = counts.get((module, name), 0) + 1
    return counts


def test_no_module_outside_the_wire_format_spells_a_surface_name_but_the_allowed_ones() -> None:
    assert spellings_outside_the_wire() == ALLOWED


def test_the_literal_check_finds_a_surface_name_spelled_as_a_value_or_quoted(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""About api=\'messages\', in a docstring: not counted."""\n'
        'A = "responses"\n'
        "B = f\"got api='systemone' for {A}\"\n"
        'C = {"chat_completions": 1}\n'
        'D = "a message about messages"\n',
        encoding="utf-8",
    )
    assert sorted(spelled_names(module)) == [("chat_completions", 4), ("responses", 2), ("systemone", 3)]


def _wire_modules_with_a_record() -> list[str]:
    found = []
    for info in pkgutil.iter_modules(_wire.__path__):
        module = importlib.import_module(f"jevper._wire.{info.name}")
        if hasattr(module, "RECORD"):
            found.append(info.name)
    return found


def test_every_wire_module_that_declares_a_record_is_in_the_registry_under_its_own_name() -> None:
    modules = [importlib.import_module(f"jevper._wire.{name}") for name in _wire_modules_with_a_record()]
    assert sorted(m.RECORD.name for m in modules) == sorted(RECORDS)
    for module in modules:
        assert module.RECORD.name == module.SURFACE
        assert RECORDS[module.RECORD.name] is module.RECORD


def test_the_surface_types_and_the_public_api_values_are_the_registry() -> None:
    assert typing.get_args(_wire.PromptSurface) == PROMPT_SURFACES == tuple(PROMPT_RECORDS)
    assert typing.get_args(_wire.Surface) == SURFACES == tuple(RECORDS)
    assert typing.get_args(models.Api) == models.APIS == ("auto", *SURFACES)
    assert [r.name for r in RECORDS.values() if isinstance(r, NativeSurfaceRecord)] == ["systemone"]


REQUEST = WireRequest(
    model="m",
    system="s",
    turns=(Turn("user", "u"),),
    logprobs=True,
    schema=SchemaFormat("answer", {"type": "object", "properties": {}}),
    thinking_budget=64,
)


@pytest.mark.parametrize("name", PROMPT_SURFACES)
def test_every_prompt_surface_record_is_complete(name: str) -> None:
    r = PROMPT_RECORDS[name]  # type: ignore[index]
    assert isinstance(r, PromptSurfaceRecord)
    assert r.title and r.route and r.sdk_resource and r.answer_list
    body = r.build(REQUEST)
    # The SDK's keywords and the fields the surface may drop are fields its requests carry.
    assert r.keywords <= set(body)
    assert r.droppable <= set(body)
    assert "model" in r.keywords
    conversation = r.conversation((("system", "s"), ("user", "u")))
    assert conversation and all(key in body for key in conversation)


def test_the_command_lines_take_their_surface_choices_from_the_registry() -> None:
    api = next(a for a in parser()._actions if a.dest == "api")
    assert tuple(api.choices or ()) == ("auto", *PROMPT_SURFACES)
    spawner = argparse.ArgumentParser()
    SPAWNER.add_arguments(spawner.add_argument_group())
    gateway_api = next(a for a in spawner._actions if a.dest == "gateway_api")
    assert tuple(gateway_api.choices or ()) == ("auto", *PROMPT_SURFACES)


def test_the_gateway_and_the_batch_engine_pick_anthropics_sdk_for_messages_alone() -> None:
    assert models.sdk_for("messages") == "anthropic"
    for api in ("auto", "chat_completions", "responses", "systemone"):
        assert models.sdk_for(api) == "openai"
