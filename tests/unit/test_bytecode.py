"""``runner/bytecode.py`` on a site directory made here: the byte-code it writes is what Python's
own compiler writes, and the probe's list (the candidate's output) steers nothing outside the
site."""

from __future__ import annotations

import os
import py_compile
import sys
from importlib.util import cache_from_source
from pathlib import Path

import pytest

from runner import bytecode


def _site(root: Path) -> Path:
    site = root / "env" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = site / "site-packages"
    (site / "cudnn" / "sub").mkdir(parents=True)
    (site / "cudnn" / "__init__.py").write_text("from cudnn.sub import mod\nVALUE = 1\n")
    (site / "cudnn" / "sub" / "__init__.py").write_text("")
    (site / "cudnn" / "sub" / "mod.py").write_text("# -*- coding: utf-8 -*-\nNAME = 'é'\n")
    return site


def test_the_byte_code_is_what_python_writes_and_only_for_the_files_named(tmp_path: Path) -> None:
    site = _site(tmp_path)
    (site / "cudnn" / "unused.py").write_text("X = 2\n")
    names = ["cudnn/__init__.py", "cudnn/sub/__init__.py", "cudnn/sub/mod.py"]
    done = bytecode.compile_imported(site, names)
    assert (done.files, done.skipped) == (3, 0)
    for name in names:
        ours = Path(cache_from_source(str(site / name)))
        theirs = tmp_path / "ref.pyc"
        py_compile.compile(str(site / name), cfile=str(theirs), doraise=True)
        assert ours.read_bytes() == theirs.read_bytes(), name
    assert not Path(cache_from_source(str(site / "cudnn" / "unused.py"))).exists()


def test_names_outside_the_site_or_not_sources_are_refused(tmp_path: Path) -> None:
    site = _site(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.py").write_text("X = 1\n")
    (site / "cudnn" / "link.py").symlink_to(outside / "evil.py")
    (site / "cudnn" / "linked_dir").symlink_to(outside)
    (site / "cudnn" / "broken.py").write_text("def (:\n")
    (site / "cudnn" / "big.py").write_text("X = 1\n" + "#" * bytecode.MAX_FILE_BYTES)
    (site / "cudnn" / "data.txt").write_text("X = 1\n")
    names: list[object] = [
        "../../../../outside/evil.py",
        str(outside / "evil.py"),
        "cudnn/link.py",
        "cudnn/linked_dir/evil.py",
        "cudnn/broken.py",
        "cudnn/big.py",
        "cudnn/data.txt",
        "cudnn/missing.py",
        "cudnn/\0.py",
        42,
        None,
    ]
    done = bytecode.compile_imported(site, names)
    assert (done.files, done.skipped) == (0, len(names))
    assert sorted(p.name for p in outside.iterdir()) == ["evil.py"]
    assert not list(site.rglob("*.pyc"))
    assert bytecode.compile_imported(site, {"cudnn/__init__.py": 1}).files == 0  # not a list


def test_a_planted_pycache_link_gets_nothing_written_through_it(tmp_path: Path) -> None:
    site = _site(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (site / "cudnn" / "__pycache__").symlink_to(elsewhere)
    done = bytecode.compile_imported(site, ["cudnn/__init__.py", "cudnn/sub/mod.py"])
    assert (done.files, done.skipped) == (1, 1)  # the link's directory refused, the other written
    assert list(elsewhere.iterdir()) == []
    assert Path(cache_from_source(str(site / "cudnn" / "sub" / "mod.py"))).is_file()


def test_bounds_and_another_interpreter_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _site(tmp_path)
    other = tmp_path / "other" / "lib" / "python2.7" / "site-packages"
    other.mkdir(parents=True)
    (other / "m.py").write_text("X = 1\n")
    assert bytecode.compile_imported(other, ["m.py"]).files == 0  # another magic number
    monkeypatch.setattr(bytecode, "MAX_FILES", 2)
    names = ["cudnn/__init__.py", "cudnn/sub/__init__.py", "cudnn/sub/mod.py"]
    assert (bytecode.compile_imported(site, names).files, len(list(site.rglob("*.pyc")))) == (2, 2)
    for pyc in site.rglob("*.pyc"):
        os.unlink(pyc)
    monkeypatch.setattr(bytecode, "MAX_BYTES", len("from cudnn.sub import mod\nVALUE = 1\n"))
    done = bytecode.compile_imported(site, names)
    assert done.files == 2  # the first file fills the budget; the empty one still fits
    assert not Path(cache_from_source(str(site / "cudnn" / "sub" / "mod.py"))).exists()
