"""The torch installed beside the runner, which every candidate environment reuses: found from its
distribution's metadata, without importing it. The sandbox reads it too (``jobbox``: the host's
torch is bound read-only into a job's box), so it lives apart from the environments that
``envs`` builds on it."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostTorch:
    version: str
    site_dir: Path


def host_torch() -> HostTorch | None:
    """The torch installed beside the runner, found without importing it."""
    try:
        dist = importlib.metadata.distribution("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    return HostTorch(version=dist.version, site_dir=Path(str(dist.locate_file(""))).resolve())
