"""ARCHITECTURE.md's import rules, checked: each layer imports only what the map says it may."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from _source import nodes

import jevper

PACKAGE = Path(__file__).resolve().parents[1] / "jevper"
#: The client core's private modules the harness may still use, as ARCHITECTURE.md says.
HARNESS_MAY_USE = {"jevper._wire", "jevper._errors", "jevper._deadline", "jevper._failure", "jevper._atomic"}
#: The packages built on the client: it imports none of them.
ABOVE_THE_CLIENT = (
    "jevper.probe",
    "jevper.serve",
    "jevper.servers",
    "jevper.testing",
    "jevper.batch",
    "jevper._upstreams",
    "jevper._http",
    "jevper.evaluate",
)
#: The private modules the batch engine and the gateway share: the several-servers pool and the aiohttp
#: connection to an OpenAI-style server.
SHARED = {"jevper._upstreams", "jevper._http"}


def module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Every jevper module and the jevper modules it imports (`from jevper import x` names x)."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        names: set[str] = set()
        for node in nodes(path):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jevper"):
                names.add(node.module)
                if node.module == "jevper":
                    names.update(f"jevper.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names if alias.name.startswith("jevper"))
        found[module_of(path)] = names
    return found


class _Imports(Mapping[str, set[str]]):
    """`imports()`, its modules listed from the file names (which collecting the tests needs) and the
    files parsed at the first look inside a test: parsing them all cost each of the offline suite's
    workers half a second while collecting."""

    def __init__(self) -> None:
        self._modules = [module_of(path) for path in sorted(PACKAGE.rglob("*.py"))]
        self._parsed: dict[str, set[str]] | None = None

    def __getitem__(self, module: str) -> set[str]:
        if self._parsed is None:
            self._parsed = imports()
        return self._parsed[module]

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


IMPORTS = _Imports()
#: Every private module of the client core, read from the files (none named by hand, none left out).
CLIENT_CORE_PRIVATE = {
    m
    for m in IMPORTS
    if m.startswith("jevper._") and m.count(".") == 1 and m not in HARNESS_MAY_USE | set(ABOVE_THE_CLIENT)
}


def under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("module", [m for m in IMPORTS if under(m, "jevper._wire")])
def test_the_wire_format_imports_nothing_of_jevper_but_itself_and_the_errors(module: str) -> None:
    strays = {m for m in IMPORTS[module] if not under(m, "jevper._wire") and m != "jevper._errors"}
    assert strays == set()


def test_the_failure_policy_imports_nothing_of_jevper_but_the_errors() -> None:
    assert IMPORTS["jevper._failure"] <= {"jevper._errors"}


def test_the_atomic_writer_imports_nothing_of_jevper() -> None:
    assert IMPORTS["jevper._atomic"] == set()


def test_every_module_the_rules_name_exists() -> None:
    named = HARNESS_MAY_USE | set(ABOVE_THE_CLIENT) | CLIENT_CORE_PRIVATE
    assert named - set(IMPORTS) == set()
    assert {"jevper._native", "jevper._routes", "jevper._transport"} <= CLIENT_CORE_PRIVATE


@pytest.mark.parametrize("module", [m for m in IMPORTS if not any(under(m, p) for p in ABOVE_THE_CLIENT)])
def test_the_client_never_imports_the_harness_the_gateway_the_servers_or_the_test_servers(
    module: str,
) -> None:
    strays = {m for m in IMPORTS[module] if any(under(m, p) for p in ABOVE_THE_CLIENT)}
    assert strays == set()


@pytest.mark.parametrize("module", [m for m in IMPORTS if under(m, "jevper.probe")])
def test_the_harness_reads_bodies_through_the_wire_and_never_the_client_cores_private_modules(
    module: str,
) -> None:
    assert IMPORTS[module] & CLIENT_CORE_PRIVATE == set()
    assert not {m for m in IMPORTS[module] if under(m, "jevper.serve") or under(m, "jevper.testing")}


@pytest.mark.parametrize("module", [m for m in IMPORTS if under(m, "jevper.servers")])
def test_the_servers_import_nothing_of_jevper_but_themselves_its_version_and_surfaces(module: str) -> None:
    # The surface registry (jevper._wire, which imports nothing but the errors) gives the gateway's --api
    # choices.
    allowed = {"jevper", "jevper.__version__", "jevper._wire"}
    strays = {m for m in IMPORTS[module] if not under(m, "jevper.servers") and m not in allowed}
    assert strays == set()


@pytest.mark.parametrize("module", [m for m in IMPORTS if under(m, "jevper.serve")])
def test_the_gateway_starts_servers_through_jevper_servers_never_the_harness(module: str) -> None:
    strays = {m for m in IMPORTS[module] if under(m, "jevper.probe") or under(m, "jevper.testing")}
    # The several-servers pool and the aiohttp connection are the private modules it shares, with the batch.
    assert IMPORTS[module] & CLIENT_CORE_PRIVATE - SHARED == set()
    assert strays == set()


@pytest.mark.parametrize("module", [m for m in IMPORTS if under(m, "jevper.testing")])
def test_the_test_servers_import_only_the_wire_format(module: str) -> None:
    strays = {m for m in IMPORTS[module] if not under(m, "jevper.testing") and not under(m, "jevper._wire")}
    assert strays == set()


def test_only_the_transport_names_the_sdks_create_calls() -> None:
    callers = [
        module_of(path)
        for path in PACKAGE.rglob("*.py")
        if '"create"' in path.read_text(encoding="utf-8") and not under(module_of(path), "jevper.probe")
    ]
    assert callers == ["jevper._transport"]


#: What the batch engine and the several-servers pool may use of jevper: the public client and its values.
PUBLIC = {
    "jevper",
    "jevper.async_client",
    "jevper.client",
    "jevper.questions",
    "jevper.models",
    "jevper.calibration",
    # the one renormalising, clamping and top probability (the review and the evaluation read answers)
    "jevper._distribution",
    "jevper._errors",
    "jevper._atomic",
} | {f"jevper.{name}" for name in jevper.__all__}


@pytest.mark.parametrize("module", [m for m in IMPORTS if m == "jevper._upstreams"])
def test_the_upstreams_pool_stands_on_the_public_client_and_the_failure_policy(module: str) -> None:
    assert IMPORTS[module] - PUBLIC - {"jevper._failure"} == set()


@pytest.mark.parametrize("module", [m for m in IMPORTS if under(m, "jevper.batch")])
def test_the_batch_engine_uses_the_public_client_and_the_upstreams_pool_and_no_private_core(
    module: str,
) -> None:
    # The command line's --spawn starts the embedded llama.cpp through jevper.servers, as the gateway's does;
    # the package names a missing extra through jevper.servers.console.
    command_line = module in ("jevper.batch.cli", "jevper.batch")
    spawns = {m for m in IMPORTS[module] if under(m, "jevper.servers")} if command_line else set()
    strays = {m for m in IMPORTS[module] if not under(m, "jevper.batch") and m not in PUBLIC | SHARED}
    assert strays - spawns == set()


def test_only_the_evaluation_imports_the_batch_and_only_it_and_the_gateway_use_the_shared_modules() -> None:
    batch_users = {m for m, names in IMPORTS.items() if any(under(n, "jevper.batch") for n in names)}
    assert {m for m in batch_users if not (under(m, "jevper.batch") or under(m, "jevper.evaluate"))} == set()
    for shared in sorted(SHARED):
        users = {m for m, names in IMPORTS.items() if shared in names}
        strays = {m for m in users if not (under(m, "jevper.batch") or under(m, "jevper.serve"))}
        assert strays == set(), shared


def test_only_the_shared_connection_imports_aiohttp() -> None:
    importers = {
        module_of(path)
        for path in PACKAGE.rglob("*.py")
        if any(
            (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "aiohttp" for a in node.names))
            or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "aiohttp")
            for node in nodes(path)
        )
    }
    assert importers == {"jevper._http"}


@pytest.mark.parametrize("module", [m for m in IMPORTS if under(m, "jevper.evaluate")])
def test_the_evaluation_uses_the_public_package_and_the_batch_engine_and_nothing_imports_it(
    module: str,
) -> None:
    # Its command line starts the embedded server (--spawn) and shares the command lines' flags.
    servers = module in ("jevper.evaluate.cli", "jevper.evaluate")
    strays = {
        m
        for m in IMPORTS[module]
        if not under(m, "jevper.evaluate")
        and not under(m, "jevper.batch")
        and m not in PUBLIC
        and not (servers and under(m, "jevper.servers"))
    }
    assert strays == set()
    # Tables are read through the batch's own reading; pyarrow stays the batch's.
    path = next(p for p in PACKAGE.rglob("*.py") if module_of(p) == module)
    assert "import pyarrow" not in path.read_text(encoding="utf-8")
    users = {m for m, names in IMPORTS.items() if any(under(n, "jevper.evaluate") for n in names)}
    assert {m for m in users if not under(m, "jevper.evaluate")} == set()
