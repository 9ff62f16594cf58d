"""Standard output and error for the command lines: a reader that goes away (``| head``, a parent
killed) costs the lines still to come, not the run. The run goes on, keeps what it writes to files,
and exits with the status its own outcome gives."""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class _Outliving(io.TextIOBase):
    """A text stream that drops what it is given once its reader has gone, instead of raising."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self._stream.write(text)
            except BrokenPipeError:
                self._went()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._went()

    def _went(self) -> None:
        self.gone = True
        # The interpreter flushes the stream again at exit: point its descriptor at nothing, so that
        # flush succeeds and no "Exception ignored" follows.
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())

    def isatty(self) -> bool:
        return not self.gone and self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def outliving_reader() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` outlive their readers within the block."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Outliving(out), _Outliving(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def install_command(extra: str) -> str:
    """The README's install command for ``extra``: the registry's ``jevper`` is another project, so
    never ``pip install 'jevper[...]'``; the extra pins what it installs."""
    return f"pip install -e '.[{extra}]' in a checkout of jevper (the registry's jevper is another project)"


def missing_extra(what: str, extra: str, module: str) -> str:
    """The one line that says ``what`` needs ``extra`` (``module`` is missing) and how to install it."""
    return f"{what} needs the '{extra}' extra ({module} is not installed): {install_command(extra)}"


def running_command() -> str | None:
    """``python -m jevper.X`` when this process was started as one of jevper's command lines."""
    argv = sys.orig_argv
    for flag, name in itertools.pairwise(argv):
        if flag == "-m" and name.startswith("jevper."):
            return f"python -m {name}"
    return None


@contextlib.contextmanager
def extra_required(package: str, extra: str) -> Iterator[None]:
    """A module from outside jevper missing within the block: a command line ends with
    ``missing_extra``'s line and exit status 2, not a traceback; an import in a program raises
    ModuleNotFoundError with that line."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] == "jevper":
            raise
        command = running_command()
        line = missing_extra(command or package, extra, exc.name)
        if command is None:
            raise ModuleNotFoundError(line, name=exc.name) from None
        print(line, file=sys.stderr)
        raise SystemExit(2) from None
