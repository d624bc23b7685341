"""The torch installed beside the runner, which every candidate environment reuses: found from its
distribution's metadata, without importing it. The sandbox reads it too (``jobbox``: the host's
torch is bound read-only into a job's box), so it lives apart from the environments that
``envs`` builds on it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import time
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


# A host torch installed without bytecode (an image built with PYTHONDONTWRITEBYTECODE, or
# ``pip install --no-compile``) is compiled from source by every stage's interpreter: on the lent
# GPU hosts' image (none of torch's 2,141 modules had any), importing torch and torch._dynamo took
# 8.4 s, and 5.3 s with bytecode (an H100). Stages cannot write it (their sandbox shows it
# read-only), so the runner compiles it once, where it may.
BYTECODE_TIMEOUT_S = 900.0


def lacks_bytecode(torch: HostTorch) -> bool:
    """Whether the host torch's own package has no bytecode for this interpreter."""
    init = torch.site_dir / "torch" / "__init__.py"
    return init.is_file() and not Path(importlib.util.cache_from_source(str(init))).is_file()


def compile_bytecode(
    torch: HostTorch | None, timeout_s: float = BYTECODE_TIMEOUT_S
) -> tuple[str, str]:
    """Compile the bytecode the host torch's site directory lacks, for this interpreter: (event,
    words). ``ok``: nothing lacked, or compiled now; ``unwritable``: the operator's command to
    run once; ``failed``: what went wrong (stages then compile what they import, as before)."""
    if torch is None or not lacks_bytecode(torch):
        return "ok", "the host torch has its bytecode"
    site = str(torch.site_dir)
    command = [sys.executable, "-m", "compileall", "-q", "-j", "0", site]
    if not os.access(site, os.W_OK):
        return "unwritable", f"no bytecode and not writable here: run `{' '.join(command)}` once"
    t0 = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as exc:
        return "failed", f"{type(exc).__name__}: {exc}"
    took = time.monotonic() - t0
    if lacks_bytecode(torch):
        return "failed", f"compileall exited {done.returncode}: {done.stdout[-300:]}"
    return "ok", f"compiled the bytecode of {site} in {took:.1f} s"
