"""The runner compiles the host torch's bytecode once, where the host installed it without any.

The site directory is a copy of real packages (the host's own torch is left alone: the suite must
not change what it runs on); the interpreter that compiles it is the runner's, as on a host.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from runner.envs import host

PACKAGES = ("json", "email")  # pure-Python packages of the standard library, copied as "torch"


def _cached(path: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(path)))


@pytest.fixture
def bare(tmp_path: Path) -> host.HostTorch:
    """A site directory with no bytecode: "torch" and a dependency beside it."""
    site = tmp_path / "site-packages"
    for name, src in zip(("torch", "sympy"), PACKAGES, strict=True):
        shutil.copytree(
            Path(shutil.__file__).parent / src,
            site / name,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    assert not list(site.rglob("*.pyc"))
    return host.HostTorch(version="2.13.0", site_dir=site)


def test_a_host_torch_without_bytecode_gets_it_once(bare: host.HostTorch) -> None:
    assert host.lacks_bytecode(bare)
    event, words = host.compile_bytecode(bare)
    assert event == "ok" and words.startswith(f"compiled the bytecode of {bare.site_dir}"), words
    sources = sorted(bare.site_dir.rglob("*.py"))
    assert sources and all(_cached(p).is_file() for p in sources)  # the dependency's too
    assert not host.lacks_bytecode(bare)
    # what a stage's interpreter accepts: its magic, stamped with the source's mtime and size
    for src in sources:
        head, info = _cached(src).read_bytes()[:16], src.stat()
        assert head[:4] == importlib.util.MAGIC_NUMBER and head[4:8] == b"\0\0\0\0", src
        stamp = (int(info.st_mtime) & 0xFFFFFFFF, info.st_size & 0xFFFFFFFF)
        assert (
            int.from_bytes(head[8:12], "little"),
            int.from_bytes(head[12:16], "little"),
        ) == stamp
    # and the next start has nothing to do
    assert host.compile_bytecode(bare) == ("ok", "the host torch has its bytecode")


def test_no_host_torch_is_nothing_to_compile() -> None:
    assert host.compile_bytecode(None) == ("ok", "the host torch has its bytecode")
