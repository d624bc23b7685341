"""Folders a process holds while it lives, under a root that several processes share.

Runners of one host may share a cache directory (a CPU runner beside the GPU runner): what one
of them keeps there for its own life (its warm zygotes) must not be removed by another. Each
process takes a folder of its own, ``<root>/<pid>-<random>``, and holds an exclusive lock on its
``.lock`` for as long as it lives; the lock ends with the process however it ends, so a folder
whose lock is free is a process's that is gone, and the next process to start removes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import IO

LOCK = ".lock"


def hold_folder(
    root: Path, unlocked_is_stale: Callable[[str], object] = lambda _name: False
) -> tuple[Path, IO[bytes]]:
    """A new folder of this process's under ``root``, held while the returned file stays open.

    Folders of processes gone (their lock free) are removed first, and so are folders without a
    lock whose name ``unlocked_is_stale`` says belongs to a layout before this one."""
    root.mkdir(parents=True, exist_ok=True)
    for old in root.iterdir():
        if not old.is_dir():
            continue
        lock = old / LOCK
        if not lock.exists():
            if unlocked_is_stale(old.name):
                shutil.rmtree(old, ignore_errors=True)
            continue
        with contextlib.suppress(OSError), lock.open("rb") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live process's
            shutil.rmtree(old, ignore_errors=True)
    own = root / f"{os.getpid()}-{secrets.token_hex(4)}"
    own.mkdir()
    held = (own / LOCK).open("wb")
    fcntl.flock(held, fcntl.LOCK_EX)
    return own, held
