"""Which modules a Python file imports, read from its source with ``ast`` (nothing is run): the
import rules of tests/functional/test_imports.py and test_rooms.py are written over it."""

from __future__ import annotations

import ast
from pathlib import Path

from testkit.service import ROOT


def imported(
    path: Path, package: tuple[str, ...] | None = None, *, when_run: bool = False
) -> set[str]:
    """Every module ``path`` imports, at any depth, as absolute names: a relative import
    (``from . import test_x``) is resolved against ``package``, by default the folders from the
    checkout's root to ``path``. ``when_run``: leave out those under ``if TYPE_CHECKING:``."""
    if package is None:
        package = path.parent.relative_to(ROOT).parts if path.is_relative_to(ROOT) else ()
    tree = ast.parse(path.read_text(), str(path))
    skip = type_checking_only(tree) if when_run else set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:``: imports that never run."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip
