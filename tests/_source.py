"""The project's own modules as syntax trees, parsed once per test process: the architecture's, the
surfaces', the atomic writer's and the harness's rules each read every module's tree."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the module at ``path``, in ``ast.walk``'s order."""
    return tuple(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
