"""Who may import whom, read from the source with ``ast``: a test module never imports another
test module or conftest (shared helpers are in tests/helpers.py and testkit/), the benchmarks and
the tests never import each other (what both need is in testkit/), and the product never imports
testkit.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from testkit.service import ROOT


def imported(path: Path, package: tuple[str, ...] | None = None) -> set[str]:
    """Every module ``path`` imports, at any depth, as absolute names: a relative import
    (``from . import test_x``) is resolved against ``package``, by default the folders from the
    checkout's root to ``path``."""
    if package is None:
        package = path.parent.relative_to(ROOT).parts if path.is_relative_to(ROOT) else ()
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def offenders(folder: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    out = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        bad = sorted(n for n in imported(path) if n.split(".")[0] in forbidden)
        if bad:
            out[str(path.relative_to(ROOT))] = bad
    return out


def test_no_test_module_imports_another() -> None:
    """Nor conftest: pytest loads it itself, and what tests share is in tests/helpers.py."""
    found = {
        str(path.relative_to(ROOT)): sorted(
            n
            for n in imported(path)
            if any(p.startswith("test_") or p == "conftest" for p in n.split("."))
        )
        for path in sorted((ROOT / "tests").rglob("*.py"))
    }
    assert {k: v for k, v in found.items() if v} == {}


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("bench", ("tests",)),
        ("tests", ("bench",)),
        ("testkit", ("tests", "bench")),
        ("service", ("tests", "bench", "testkit")),
        ("runner", ("tests", "bench", "testkit")),
    ],
)
def test_imports_stay_on_their_side(folder: str, forbidden: tuple[str, ...]) -> None:
    assert offenders(folder, forbidden) == {}


def test_the_check_sees_an_import_written_inside_a_function(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from tests.test_protocol import stage\n    import bench.load\n")
    assert {"tests.test_protocol", "bench.load"} <= imported(src)


@pytest.mark.parametrize(
    ("source", "seen"),
    [
        ("from . import test_protocol\n", "tests.test_protocol"),
        ("from .test_protocol import stage\n", "tests.test_protocol"),
        ("from ..bench import load\n", "bench.load"),
    ],
)
def test_the_check_sees_a_relative_import(tmp_path: Path, source: str, seen: str) -> None:
    """tests/ is a package, so a test module could reach another one relatively."""
    src = tmp_path / "m.py"
    src.write_text(source)
    assert seen in imported(src, package=("tests",))
