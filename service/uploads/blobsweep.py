"""Orphan blobs: a wheel in ``<data_dir>/blobs`` that no build or artifact references.

An upload stores its blob first and then commits the build that references it; a service killed
between the two (or a database that refused the commit while the process died) leaves the blob
with nothing pointing at it. ``sweep_orphans`` removes such blobs, at start-up and with the
periodic sweep, once they are older (by modification time) than the grace period: an upload in
flight stores its blob milliseconds before its commit, and an upload that reuses an existing
blob touches it first (``uploads._store``), so neither is ever within reach of the sweep.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

from sqlalchemy import select, union
from sqlalchemy.orm import Session

from service.models import Artifact, Build

log = logging.getLogger("fe_ci.blobs")

_BLOB = re.compile(r"[0-9a-f]{64}\.whl")


def _old_blobs(data_dir: Path, cutoff: float) -> list[Path]:
    root = data_dir / "blobs"
    if not root.is_dir():
        return []
    found = []
    for path in root.glob("??/*.whl"):
        try:
            if _BLOB.fullmatch(path.name) and path.stat().st_mtime <= cutoff:
                found.append(path)
        except FileNotFoundError:
            continue
    return found


def sweep_orphans(session: Session, data_dir: Path, grace_s: float, *, where: str) -> int:
    """Remove blobs older than ``grace_s`` that nothing references; the count removed."""
    cutoff = time.time() - grace_s
    candidates = _old_blobs(data_dir, cutoff)
    if not candidates:
        return 0
    referenced = set(
        session.scalars(
            union(
                select(Build.sha256).where(Build.sha256.is_not(None)),
                select(Artifact.sha256),
            )
        )
    )
    removed = 0
    for path in candidates:
        sha256 = path.name.removesuffix(".whl")
        if sha256 in referenced:
            continue
        try:
            if path.stat().st_mtime > cutoff:  # reused by an upload since it was listed
                continue
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            continue
        removed += 1
        log.info("event=orphan_blob_removed sha256=%s size=%s at=%s", sha256, size, where)
    return removed
