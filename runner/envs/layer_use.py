"""Using dependency layers: each use stamped, and their total size bounded (``runner/lru.py``).

Each use of a layer stamps ``<key>.used`` beside it (``found``, and ``touch`` after a build);
after each job the runner removes the least recently used layers once they pass its budget
(``evict``: ``FE_CI_LAYERS_MAX_GB``), never one used within ``FE_CI_CACHE_UNUSED_S`` (a job may
be running on it) or one whose lock another runner holds (it is being built, or stamped); a later
job that needs it builds it again. A candidate picks its dependency set, so without the bound
uploads with distinct pins would each leave a layer of their own (1.32.0's is about 600 MB) until
the disk was full.
"""

from __future__ import annotations

import fcntl
import logging
import time
from pathlib import Path

from runner import lru
from runner.envs.layers import KEY, Layer, LayerSpec, remove, usable

log = logging.getLogger("fe_ci.layers")


def found(layers_dir: Path, spec: LayerSpec) -> Layer | None:
    """The layer of ``spec`` if it is built, its use stamped under a shared hold of its lock (an
    eviction takes the lock whole); None where it is absent, or its lock is held whole (it is
    being built or removed: the caller waits for the lock)."""
    if not (layers_dir / spec.key / "layer.json").is_file():
        return None
    with open(layers_dir / f"{spec.key}.lock", "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        layer = usable(layers_dir / spec.key, spec)
        if layer is not None:
            touch(layers_dir, spec.key)
        return layer


def touch(layers_dir: Path, key: str) -> None:
    """Stamp a use of the layer ``key`` (its ``.used`` file's time)."""
    lru.stamp(layers_dir / f"{key}.used")


def size_of(layers_dir: Path, key: str) -> int:
    """The layer's bytes on disk, measured once and kept in ``<key>.bytes``."""
    return lru.kept_bytes(layers_dir / key, layers_dir / f"{key}.bytes")


def _last_used(layers_dir: Path, key: str) -> float:
    return lru.last_used(layers_dir / f"{key}.used", layers_dir / key / "layer.json")


def evict(layers_dir: Path, max_bytes: int, unused_s: float) -> list[str]:
    """Remove the least recently used layers until those left fit ``max_bytes``; never one used
    within ``unused_s`` (a job may be running on it) or one whose lock is held (a runner is
    building or stamping it). The keys removed, oldest first."""
    if not layers_dir.is_dir():
        return []
    keys = [
        p.name for p in layers_dir.iterdir() if KEY.match(p.name) and (p / "layer.json").is_file()
    ]
    entries = [lru.Entry(k, size_of(layers_dir, k), _last_used(layers_dir, k)) for k in keys]

    def remove_unheld(entry: lru.Entry) -> bool:
        with open(layers_dir / f"{entry.name}.lock", "a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            if time.time() - _last_used(layers_dir, entry.name) < unused_s:
                return False  # stamped while we looked
            remove(layers_dir / entry.name)
            for leftover in (f"{entry.name}.used", f"{entry.name}.bytes"):
                (layers_dir / leftover).unlink(missing_ok=True)
            return True

    return lru.evict(entries, max_bytes, unused_s, remove_unheld, "layer")
