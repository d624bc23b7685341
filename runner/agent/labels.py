"""What this host offers: its GPU family (from nvidia-smi, without importing torch) or none."""

from __future__ import annotations

import shutil
import subprocess

from core import cells
from core.subjects import family_of


def detect_gpu() -> dict[str, str]:
    """Labels of the first GPU: arch (family), gpu (name), cc, driver. Empty without a GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    first = out.strip().splitlines()[0] if out.strip() else ""
    parts = [p.strip() for p in first.split(",")]
    if len(parts) < 3:
        return {}
    name, cc, driver = parts[:3]
    labels = {"gpu": name, "cc": cc, "driver": driver}
    try:
        major, minor = (int(x) for x in cc.split(".", 1))
    except ValueError:
        return labels
    family = family_of(major, minor)
    if family:
        labels["arch"] = family
    return labels


NO_GPU = "none"  # ``arch=none``: a CPU runner on a GPU host
GPU_LABELS = ("arch", "gpu", "cc", "driver")


def host_labels(override: dict[str, str] | None) -> dict[str, str]:
    """``FE_CI_RUNNER_LABELS`` overrides detection key by key. A runner installs any cuDNN
    backend a job asks for (``runner/envs/backend.py``), so it offers ``cudnn=*``; a label of
    its own (``cudnn=9.28.1|9.26.0``, or ``cudnn=host`` for none) narrows that. ``arch=none``
    offers no GPU on a host that has one: a CPU runner beside the GPU runner, so that a build's
    CPU job runs while its GPU job does instead of after it."""
    override = dict(override or {})
    no_gpu = override.get("arch", "").strip().lower() == NO_GPU
    labels = {cells.CUDNN: cells.ANY_VALUE, **({} if no_gpu else detect_gpu())}
    labels.update(override)
    if no_gpu:
        for key in GPU_LABELS:
            labels.pop(key, None)
    return labels
