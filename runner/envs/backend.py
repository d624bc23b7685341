"""A cuDNN backend of the matrix: its wheel, installed once per host as a dependency layer.

A job on a cell such as ``sm_90-cudnn9.28.1`` (``core/cells.py``) runs on the backend wheel that
matches the host torch's CUDA major (``nvidia-cudnn-cu13`` for a CUDA 13 torch, ``-cu12`` for 12;
a CPU-only torch takes cu13, the newest). The wheel is a layer like a candidate's dependencies
(``runner/envs/layers.py``: keyed by what decides its contents, built once under a file lock,
read-only, reused by every later job of the host), checked without holding the host torch to its
own pin of the backend, which this layer is meant to replace. The stages then load it: its
``nvidia/cudnn/lib`` goes first on ``LD_LIBRARY_PATH`` (the frontend dlopens the first
``libcudnn.so.9`` there) and the layer on ``sys.path``; which library each of torch and the
frontend loaded is read back from ``/proc/self/maps`` (``runner/inside/loaded.py``).
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

from core import cells
from runner.envs import envs, layers, warm_install
from runner.isolation import jail
from runner.isolation.jobbox import JobBox

BACKEND_PTH = "_fe_ci_0_backend.pth"  # sorts before the dependency layer's: the backend wins
DEFAULT_CUDA_MAJOR = 13
_CUDNN_DIST = re.compile(r"^nvidia[-_]cudnn[-_]cu(\d+)\b", re.I)
_LOCAL_CUDA = re.compile(r"\+cu(\d+)")


def cuda_major() -> int:
    """The CUDA major of the host torch, read from its metadata (its own cuDNN wheel, else its
    ``+cuXYZ`` local version); a CPU-only torch, or none, gives ``DEFAULT_CUDA_MAJOR``."""
    try:
        dist = importlib.metadata.distribution("torch")
    except importlib.metadata.PackageNotFoundError:
        return DEFAULT_CUDA_MAJOR
    for line in dist.requires or []:
        if match := _CUDNN_DIST.match(line.strip()):
            return int(match[1])
    if match := _LOCAL_CUDA.search(dist.version):
        digits = match[1]
        return int(digits[:-1]) if len(digits) >= 3 else int(digits)
    return DEFAULT_CUDA_MAJOR


def requirement(version: str) -> str:
    """The backend wheel this host installs for ``version``."""
    return cells.backend_requirement(version, cuda_major())


def ensure(
    version: str,
    *,
    layers_dir: Path,
    timeout_s: float,
    index_url: str | None,
    wheelhouse: Path | None,
    job: JobBox | None = None,
) -> layers.Layer:
    """The backend's layer: reused when this host has it (``built_s`` None), else built once.
    Raises ``LayerError`` with the installer's message when the wheel does not install."""
    req = requirement(version)
    meta = envs.WheelMetadata(
        name=f"cudnn-backend-{version}", version=version, extras=frozenset(), requires=(req,)
    )
    layer = warm_install.ensure_layer(
        meta,
        layers_dir=layers_dir,
        timeout_s=timeout_s,
        index_url=index_url,
        wheelhouse=wheelhouse,
        job=job,
        check_torch=False,
        host_deps=True,  # its CUDA libraries (nvidia-cublas) are those of the host's torch
    )
    if layer is None:  # pragma: no cover - a backend always has one requirement
        raise layers.LayerError(f"no layer for {req}")
    if not lib_dirs(layer):
        raise layers.LayerError(f"{req} installed no libcudnn (nvidia/*/lib/libcudnn*.so*)")
    return layer


def lib_dirs(layer: layers.Layer) -> list[Path]:
    """The layer's directories holding libcudnn, ``nvidia/cudnn/lib`` first."""
    nvidia = layer.site_packages / "nvidia"
    found = sorted({p.parent for p in nvidia.glob("*/lib/libcudnn*.so*")})
    found.sort(key=lambda d: d.parent.name != "cudnn")
    return found


def attach(env_site: Path | None, layer: layers.Layer) -> None:
    """Make the stages see the layer: reachable by the job's uid, and on the env's ``sys.path``
    (before the dependency layer) where the runner made the environment."""
    jail.make_reachable(layer.site_packages)
    if env_site is not None and env_site.is_dir():
        (env_site / BACKEND_PTH).write_text(
            f"import site; site.addsitedir({str(layer.site_packages)!r})\n"
        )
