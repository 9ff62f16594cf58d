"""`python -m jevper.probe`: the harness needs its own dependencies, the `probe` extra."""

import importlib
import sys

from jevper.servers.console import missing_extra

#: What the harness imports beyond the client's own dependencies (pyproject.toml's `probe` extra).
HARNESS_MODULES = {"vcr": "vcrpy", "jinja2": "jinja2", "tabulate": "tabulate", "yaml": "pyyaml"}


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


missing = [package for module, package in HARNESS_MODULES.items() if not _importable(module)]
if missing:
    print(missing_extra("python -m jevper.probe", "probe", ", ".join(missing)), file=sys.stderr)
    sys.exit(2)

from jevper.probe.cli import main  # noqa: E402 - only once its dependencies are known to be there

sys.exit(main())
