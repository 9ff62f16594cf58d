"""A cassette is parsed once per version of its file, a file written again is read again, and the
serializer writes each committed cassette byte for byte.

The fixtures are committed recordings (see their own index files for server, release and model).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from jevper.probe import cassettes
from jevper.probe.cassettes import CassetteError, load_exchanges

PROVIDERS = Path(__file__).resolve().parents[1] / "fixtures" / "providers" / "llamacpp-b11549"


def test_a_cassette_read_twice_is_parsed_once(tmp_path: Path) -> None:
    path = tmp_path / "chat-grammar.yaml"
    shutil.copyfile(PROVIDERS / "chat-grammar.yaml", path)
    first = load_exchanges(path)
    assert first and first[0].path.endswith("/chat/completions")
    assert load_exchanges(path) is first


def test_a_cassette_written_again_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "probe.yaml"
    shutil.copyfile(PROVIDERS / "chat-grammar.yaml", path)
    grammar = load_exchanges(path)
    # Replaced as the atomic writer replaces a file (a new inode), and then rewritten in place.
    replacement = tmp_path / "probe.yaml.partial"
    shutil.copyfile(PROVIDERS / "systemone-models.yaml", replacement)
    os.replace(replacement, path)
    models = load_exchanges(path)
    assert models != grammar and models[0].path.endswith("/models")
    path.write_bytes((PROVIDERS / "chat-bad-path.yaml").read_bytes())
    assert load_exchanges(path)[0].path == "/v1/jevper-no-such-route"


def test_a_missing_cassette_is_a_cassette_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(CassetteError, match=r"absent\.yaml: expected a vcrpy cassette"):
        load_exchanges(tmp_path / "absent.yaml")


def test_every_committed_cassette_is_what_the_serializer_writes_for_its_content() -> None:
    # The emitter is libyaml's where PyYAML has it; a fixture recorded again must diff only where the
    # server's answer did.
    if yaml.__with_libyaml__:
        assert issubclass(cassettes._LiteralDumper, yaml.CSafeDumper)
    files = sorted(PROVIDERS.parent.rglob("*.yaml"))
    assert len(files) > 900
    for path in files:
        text = path.read_text(encoding="utf-8")
        written = cassettes.CassetteSerializer.serialize(cassettes.CassetteSerializer.deserialize(text))
        assert written == text, path
