"""The docs are tests: every code block of the pages in PAGES runs, in the page's order, in the default
test run, against the embedded llama.cpp started as the pages say (``python -m jevper.servers.llamacpp``,
which listens on 127.0.0.1:8080, the address the pages name). Sybil reads the blocks out of the pages.

What a page may hold, and how it is run:

- A ``python`` block runs in the page's namespace: names carry from one block to the next, as in a
  reader's session.
- An ``sh`` block runs line by line (a line ending in ``\\`` goes on), each line through bash in a
  scratch folder of the page, with this interpreter as ``python``; each must exit 0.
  ``pip install`` lines are not run (they need the network): the offline test checks that the extras
  they name are pyproject.toml's and that what they install is installed here. A line that starts a
  server (``python -m jevper.serve``, ``python -m jevper.servers.llamacpp``) runs in the background
  until the page's last block has run; the next line runs once its port answers. The line that starts
  the embedded server is the one the shared server was started with, so it is not started twice.
- A block whose first line is ``# needs: WHAT`` is not run, because CI cannot have WHAT (another server,
  a GPU, a hosted key, the network); the page shows the marker, so the reader knows it too. The offline
  test checks that it says what it needs and, for Python, that it compiles.
- ``text`` and ``json`` blocks are shown, not run: a command's synopsis, an answer's shape.

FILES names the checkout's files a page's scratch folder holds before its first block runs (a page whose
commands read the checkout says that they run in one).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sybil import Document, Example
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.markdown import CodeBlockParser

from jevper.servers.process import die_with_parent_hook, port_taken

ROOT = Path(__file__).parents[1]
PAGES = (
    "getting-started.md",
    "batch.md",
    "calibration.md",
    "serve.md",
    "decisions.md",
    "probe-a-release.md",
)
#: The command the pages give for the server their examples ask, as they write it.
SERVER_COMMAND = "python -m jevper.servers.llamacpp"
SERVER_URL = "http://127.0.0.1:8080/v1"
#: What a page's scratch folder holds before its first block: copies of these files of the checkout, at
#: the same paths (the folder stands for the checkout the page's commands run in).
FILES = {
    "calibration.md": (
        "tests/fixtures/labelled/tickets.csv",
        "tests/fixtures/labelled/tickets.questions.json",
    ),
}
#: Commands that serve until stopped, and the port each listens on unless given --port.
SERVING = {("-m", "jevper.serve"): 8090, ("-m", "jevper.servers.llamacpp"): 8080}
NEEDS = re.compile(r"\A# needs: (\S.*)$", re.M)
SHOWN = ("text", "json")


def needs(source: str) -> str | None:
    """What a block needs that CI cannot have, when its first line says so."""
    found = NEEDS.match(source)
    return found.group(1) if found else None


def lines_of(source: str) -> list[str]:
    """The command lines of an sh block: continuations joined, comment lines and blank ones dropped."""
    joined = source.replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def words(line: str) -> list[str]:
    return shlex.split(line, comments=True)


# --- the pages, read once --------------------------------------------------------------------------


@dataclass
class Page:
    """One page: its document (whose namespace the Python blocks share), its scratch folder and the
    servers its blocks started."""

    name: str
    document: Document
    folder: Path | None = None
    serving: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def blocks(self) -> list[Example]:
        return list(self.document.examples())

    def runnable(self) -> list[Example]:
        return [
            block for block in self.blocks() if needs(block.parsed) is None and language(block) != "shown"
        ]

    def stop(self) -> None:
        for process in self.serving:
            stop(process)
        self.serving.clear()


def language(block: Example) -> str:
    return str(block.region.lexemes.get("language", "shown"))


class _Parser(CodeBlockParser):
    """Sybil's Markdown code-block parser for one language, remembering the language on the region."""

    def __call__(self, document: Document) -> Iterator:  # type: ignore[override]
        for region in super().__call__(document):
            region.lexemes["language"] = self.language if self.language in ("python", "sh") else "shown"
            yield region


def parse(name: str) -> Page:
    parsers = [
        _Parser("python", evaluator=lambda example: run_python(example)),
        _Parser("sh", evaluator=lambda example: run_sh(example)),
        *(_Parser(shown, evaluator=lambda example: None) for shown in SHOWN),
    ]
    return Page(name, Document.parse(str(ROOT / "docs" / name), *parsers))


PAGE = {name: parse(name) for name in PAGES}
BLOCKS = [(page, block) for page in PAGE.values() for block in page.runnable()]


def block_id(item: tuple[Page, Example]) -> str:
    page, block = item
    return f"{page.name}:{block.line}"


# --- running a block -------------------------------------------------------------------------------


def run_python(example: Example) -> None:
    __tracebackhide__ = True
    PythonEvaluator()(example)


def environment() -> dict[str, str]:
    """The environment of a page's commands: this interpreter first on PATH, as `python`."""
    path = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    return {**os.environ, "PATH": path}


def run_sh(example: Example) -> None:
    __tracebackhide__ = True
    page = PAGE[Path(example.path).name]
    assert page.folder is not None
    for line in lines_of(example.parsed):
        argv = words(line)
        if argv[:2] == ["pip", "install"]:
            continue  # checked offline: test_every_install_line_names_extras_that_are_installed_here
        serving = serves(argv)
        if serving is not None:
            if line.strip() == SERVER_COMMAND:
                continue  # the shared server, started with this very line
            page.serving.append(started(line, serving, page.folder))
            continue
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", line],
            cwd=page.folder,
            env=environment(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, (
            f"{page.name}:{example.line}: `{line}` exited {done.returncode}\n"
            f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
        )


def serves(argv: list[str]) -> int | None:
    """The port a command that serves until stopped listens on, or None for any other command."""
    if not argv or argv[0] != "python":
        return None
    default = SERVING.get(tuple(argv[1:3]))  # type: ignore[arg-type]
    if default is None:
        return None
    return int(argv[argv.index("--port") + 1]) if "--port" in argv else default


def started(line: str, port: int, folder: Path) -> subprocess.Popen[bytes]:
    """A serving command in the background, once its port answers."""
    # Else another program's answers would pass for the page's.
    assert not port_taken(port), f"`{line}`: port {port} is taken by another program; stop it first"
    log = folder / f"serving-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", "-c", f"exec {line}"],
            cwd=folder,
            env=environment(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # A test run killed without unwinding (a timeout) takes its servers with it.
            preexec_fn=die_with_parent_hook(),
        )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"`{line}` exited {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    stop(process)
    raise AssertionError(f"`{line}` did not answer on port {port} within 180 s:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


# --- the shared server and the tests ---------------------------------------------------------------


@pytest.fixture(scope="module")
def docs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The embedded llama.cpp, started as the pages say, for every page's blocks."""
    folder = tmp_path_factory.mktemp("docs-server")
    port = serves(words(SERVER_COMMAND))
    assert port is not None and f"http://127.0.0.1:{port}/v1" == SERVER_URL
    process = started(SERVER_COMMAND, port, folder)
    try:
        yield SERVER_URL
    finally:
        for page in PAGE.values():
            page.stop()
        stop(process)


@pytest.mark.live
@pytest.mark.parametrize("item", BLOCKS, ids=[block_id(item) for item in BLOCKS])
def test_the_block_runs_as_the_page_says(
    item: tuple[Page, Example],
    docs_server: str,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page, block = item
    if page.folder is None:
        page.folder = tmp_path_factory.mktemp(page.name.removesuffix(".md"))
        for path in FILES.get(page.name, ()):
            (page.folder / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / path, page.folder / path)
    monkeypatch.chdir(page.folder)
    try:
        block.evaluate()
    finally:
        if block.line == page.runnable()[-1].line:
            page.stop()


# --- offline: what the pages hold ------------------------------------------------------------------


FENCE = re.compile(r"^ *```(\S*)", re.M)


@pytest.mark.parametrize("name", PAGES)
def test_every_block_of_the_page_is_run_shown_or_says_what_it_needs(name: str) -> None:
    text = (ROOT / "docs" / name).read_text(encoding="utf-8")
    fences = FENCE.findall(text)[::2]  # opening fences; the closing ones are bare
    unknown = [f or "(none)" for f in fences if f not in ("python", "sh", *SHOWN)]
    assert unknown == [], f"expected python, sh, text or json blocks, got {unknown}"
    page = PAGE[name]
    assert len(page.blocks()) == len(fences), "expected Sybil to read every block of the page"
    for block in page.blocks():
        source = str(block.parsed)
        if language(block) == "python":
            compile(source, f"{name}:{block.line}", "exec")
        if source.startswith("# needs"):
            assert needs(source), (
                f"{name}:{block.line}: expected `# needs: WHAT`, got {source.splitlines()[0]}"
            )
        if language(block) == "sh":
            for line in lines_of(source):
                assert words(line), f"{name}:{block.line}: {line!r}"
    assert page.runnable(), "expected blocks that run"


def test_the_shared_server_is_the_one_the_pages_tell_readers_to_start() -> None:
    for name in ("getting-started.md", "batch.md", "decisions.md"):
        text = " ".join((ROOT / "docs" / name).read_text(encoding="utf-8").split())
        assert SERVER_COMMAND in text, f"{name} does not say how to start the server its examples ask"


def installed(requirement: str) -> bool:
    """Whether a requirement line (`name[extras]>=x`, `name==x`, a marker after `;`) holds here."""
    spec, _, marker = requirement.partition(";")
    if marker.strip() and "python_version" not in marker and "sys_platform" not in marker:
        return True  # a platform this machine is not: nothing to find
    found = re.match(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*(==\s*([^,\s]+))?", spec)
    assert found is not None, requirement
    try:
        version = importlib.metadata.version(found.group(1))
    except importlib.metadata.PackageNotFoundError:
        return False
    return found.group(3) is None or version == found.group(3)


def extras() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return dict(project["optional-dependencies"])


def requirements(extra: str, known: dict[str, list[str]]) -> list[str]:
    """An extra's requirements, the extras it names of jevper itself expanded."""
    found = []
    for line in known[extra]:
        inner = re.fullmatch(r"jevper\[([\w,-]+)\]", line.strip())
        found += [r for e in inner.group(1).split(",") for r in requirements(e, known)] if inner else [line]
    return found


@pytest.mark.parametrize("name", PAGES)
def test_every_install_line_names_extras_that_are_installed_here(name: str) -> None:
    known = extras()
    for block in PAGE[name].blocks():
        if language(block) != "sh" or needs(block.parsed):
            continue
        for line in lines_of(block.parsed):
            argv = words(line)
            if argv[:2] != ["pip", "install"]:
                continue
            for target in (a for a in argv[2:] if not a.startswith("-")):
                checkout = re.fullmatch(r"\.\[([\w,-]+)\]", target)
                if checkout is None:
                    assert installed(target), f"{name}:{block.line}: {target} is not installed here"
                    continue
                for extra in checkout.group(1).split(","):
                    assert extra in known, f"{name}:{block.line}: no extra {extra!r} in pyproject.toml"
                    missing = [r for r in requirements(extra, known) if not installed(r)]
                    assert missing == [], f"{name}:{block.line}: {extra}'s {missing} not installed here"


def test_a_block_that_says_what_it_needs_is_not_run_and_any_other_is() -> None:
    document = Document("```sh\n# needs: a GPU\nnvidia-smi\n```\n\n```sh\necho hi\n```\n", "x.md")
    for region in _Parser("sh", evaluator=lambda example: None)(document):
        document.add(region)
    page = Page("x.md", document)
    assert [needs(block.parsed) for block in page.blocks()] == ["a GPU", None]
    assert [block.line for block in page.runnable()] == [page.blocks()[1].line]
