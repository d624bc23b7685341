"""Folders of a cache kept within a budget: the least recently used removed first.

The dependency layers (``runner/envs/layer_use.py``) and the compile cache's keys
(``runner/cache/compile_cache.py``) grow with what candidates bring: a dependency set of their own,
kernel sources of their own. Each use of a folder is stamped; after a job the runner removes the
least recently used while the folders pass its budget, never one used within ``unused_s`` (a job
may be running on it), and the caller may decline one (another runner holds its lock).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("fe_ci.lru")


@dataclass(frozen=True)
class Entry:
    name: str
    bytes: int
    last_used: float  # seconds since the epoch


def stamp(path: Path) -> None:
    """Record a use now (the file's time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    os.utime(path)


def last_used(*paths: Path) -> float:
    """The time of the first of ``paths`` that exists; 0 where none does."""
    for path in paths:
        with contextlib.suppress(OSError):
            return path.stat().st_mtime
    return 0.0


def folder_bytes(path: Path) -> int:
    """What the files under ``path`` take, links not followed."""
    total = 0
    for here, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(here, name)).st_size
    return total


def kept_bytes(folder: Path, kept: Path) -> int:
    """``folder``'s bytes as ``kept`` holds them; measured and kept there where it holds none."""
    with contextlib.suppress(OSError, ValueError):
        return int(kept.read_text())
    total = folder_bytes(folder)
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(str(total))
    return total


def evict(
    entries: list[Entry],
    max_bytes: int,
    unused_s: float,
    remove: Callable[[Entry], bool],
    what: str,
) -> list[str]:
    """Remove the least recently used of ``entries`` (``remove`` says whether it did) until the
    rest fit ``max_bytes``, none used within ``unused_s``: the names removed, oldest first."""
    total = sum(e.bytes for e in entries)
    removed: list[str] = []
    now = time.time()
    for entry in sorted(entries, key=lambda e: e.last_used):
        if total <= max_bytes or now - entry.last_used < unused_s:
            break  # within the budget, or this one and every later one in use lately
        if not remove(entry):
            continue
        total -= entry.bytes
        removed.append(entry.name)
        log.info("event=evicted what=%s name=%s bytes=%d", what, entry.name, entry.bytes)
    if total > max_bytes:
        log.warning(
            "event=over_budget what=%s bytes=%d max_bytes=%d (the rest used within %.0f s)",
            what,
            total,
            max_bytes,
            unused_s,
        )
    return removed
