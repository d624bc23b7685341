"""No Python module of the project passes 400 lines: a module that size has become two things, and
is split along the seam between them (docs/architecture.md lists what each module is).

Counted in physical lines, as ``wc -l`` counts them, over every package the project writes:
core/, service/, runner/, cli/, testkit/, bench/ and tests/, at any depth. Alembic's revisions under
service/migrations/versions/ are no exception: each is one schema change, and none is near the
limit.
"""

from __future__ import annotations

from pathlib import Path

from testkit.service import ROOT

MAX_LINES = 400
PACKAGES = ("core", "service", "runner", "cli", "testkit", "bench", "tests")


def physical_lines(path: Path) -> int:
    """Newline characters, as ``wc -l``; a last line without one counts too."""
    data = path.read_bytes()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def oversized(root: Path, packages: tuple[str, ...], limit: int) -> dict[str, int]:
    """{path relative to ``root``: lines} for every ``*.py`` under ``packages`` over ``limit``."""
    return {
        str(path.relative_to(root)): lines
        for package in packages
        for path in sorted((root / package).rglob("*.py"))
        if (lines := physical_lines(path)) > limit
    }


def test_no_module_is_over_400_lines() -> None:
    found = oversized(ROOT, PACKAGES, MAX_LINES)
    listing = "\n".join(f"  {path}: {lines} lines" for path, lines in sorted(found.items()))
    assert not found, (
        f"{len(found)} module(s) over {MAX_LINES} lines; split each along a seam that makes "
        f"every piece one thing:\n{listing}"
    )


def test_the_count_is_wc_l_and_sees_nested_modules(tmp_path: Path) -> None:
    """A nested module over the limit is found with its length; one at the limit, or one whose
    last line lacks its newline, is counted as ``wc -l`` plus that line."""
    deep = tmp_path / "pkg" / "sub"
    deep.mkdir(parents=True)
    (deep / "big.py").write_text("x = 1\n" * 401)
    (deep / "limit.py").write_text("x = 1\n" * 400)
    (tmp_path / "pkg" / "unterminated.py").write_text("x = 1\n" * 400 + "y = 2")
    (tmp_path / "pkg" / "notes.txt").write_text("\n" * 1000)
    assert oversized(tmp_path, ("pkg",), 400) == {
        "pkg/sub/big.py": 401,
        "pkg/unterminated.py": 401,
    }
