"""The one way jevper writes a file: whole or not at all.

Every file the project writes (calibration.json, metrics.json, report.html, a recording's index, a batch's
output and its parts) goes through here. The bytes are written to a hidden temporary file in the same
folder, synced to the disk, renamed over the target, and the folder is synced so the rename itself
survives a crash. A write that fails midway removes its temporary file and leaves the old file, if any,
as it was. The module imports nothing of jevper, so every layer may use it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

__all__ = ["replacing", "sync", "write_atomically"]


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that opens files by name (Parquet, CSV, Arrow); when
    the block ends without an exception the file is synced and renamed to ``path``, otherwise removed.
    The temporary file exists (empty) when the block starts, created with the usual permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary, fd = _created(path)
    os.close(fd)
    try:
        yield temporary
        _install(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise


def write_atomically(path: Path, data: str | bytes) -> None:
    """``data`` (text is written as UTF-8) at ``path``: the old file or the new one, never a part."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary, fd = _created(path)
    try:
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        _install(temporary, path, synced=True)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise


def sync(path: Path) -> None:
    """``path`` (a file or a folder) flushed to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _created(path: Path) -> tuple[Path, int]:
    """A new hidden file beside ``path``, its name never taken before (O_EXCL), mode 0666 less the umask."""
    while True:
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return temporary, os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue


def _install(temporary: Path, path: Path, *, synced: bool = False) -> None:
    # The bytes reach the disk before the rename, and the folder's entry after it: a crash leaves the
    # old file or the new one, whole.
    if not synced:
        sync(temporary)
    os.replace(temporary, path)
    sync(path.parent)
