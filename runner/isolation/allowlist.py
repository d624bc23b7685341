"""The environment of every process the runner starts for a candidate: built from nothing.

A stage (probe, determinism, refusal; a warm zygote and the stages it forks), an installer that
may run a build's setup code, and a commit's build backend each get an empty environment plus
what it needs: the PATH of its environment, its own HOME and TMPDIR, the locale, the runner's
source on PYTHONPATH (stages), the GPU settings the host was given, and what the runner sets on
purpose (``chosen``). Installers and builds also get the package tools' own settings (``PIP_*``,
``UV_*``, proxies, certificates) and builds the toolchain's. Nothing else of the runner's
environment passes, and never a secret: a name ``redact.is_secret_name`` calls one is dropped
whatever list it is on, and the runner's own settings (``FE_CI_*``) never pass but for the test
registry extension, which is a path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from core.subjects import EXTRA_SUBJECTS_ENV
from runner.isolation.redact import is_secret_name

Kind = Literal["stage", "install", "build"]

LOCALE = ("LANG", "LANGUAGE", "TZ")
LOCALE_PREFIXES = ("LC_",)
# The GPUs this runner was given and where their libraries are: set on the host on purpose.
GPU = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
)
# What pip and uv read (an index, a wheelhouse, a proxy, a certificate bundle).
INSTALL = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
)
INSTALL_PREFIXES = ("PIP_", "UV_")
CANDIDATE_USER = "fe-ci-candidate"  # USER and LOGNAME of every candidate process
# What a commit's CMake build reads: the compilers, CUDA and cuDNN, dlpack's sources.
BUILD = ("CC", "CXX", "CUDACXX", "CUDAToolkit_ROOT", "MAX_JOBS", "NVCC_THREADS")
BUILD_PREFIXES = ("CMAKE_", "FETCHCONTENT_", "CUDNN_")

_PASS: dict[Kind, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "stage": ((*LOCALE, *GPU, EXTRA_SUBJECTS_ENV), LOCALE_PREFIXES),
    "install": ((*LOCALE, *GPU, *INSTALL), (*LOCALE_PREFIXES, *INSTALL_PREFIXES)),
    "build": (
        (*LOCALE, *GPU, *INSTALL, *BUILD),
        (*LOCALE_PREFIXES, *INSTALL_PREFIXES, *BUILD_PREFIXES),
    ),
}


def _passes(kind: Kind, name: str) -> bool:
    if is_secret_name(name):
        return False
    names, prefixes = _PASS[kind]
    return name in names or name.startswith(prefixes)


def candidate_environ(
    kind: Kind,
    *,
    home: Path,
    path: Sequence[Path] = (),
    pythonpath: Path | None = None,
    chosen: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of one candidate process of ``kind``.

    ``path``: directories put before the runner's PATH (the environment's ``bin``); ``home``: its
    HOME and TMPDIR; ``pythonpath``: the runner's candidate-side source (stages); ``chosen``:
    variables the runner sets on purpose (``CUDA_VISIBLE_DEVICES=""`` for the CPU-only probe).
    ``environ`` (default: the runner's) is read for the allowlisted names only.
    """
    source = os.environ if environ is None else environ
    env = {k: v for k, v in source.items() if _passes(kind, k)}
    dirs = [str(p) for p in path] + [source.get("PATH") or os.defpath]
    env["PATH"] = os.pathsep.join(dirs)
    env["HOME"] = env["TMPDIR"] = str(home)
    # A job's uid has no passwd entry: without these, getpass.getuser() raises, and torch's cache
    # directory (and with it ``import torch._dynamo``) fails on the releases that do not catch it.
    env["USER"] = env["LOGNAME"] = CANDIDATE_USER
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    for name, value in (chosen or {}).items():
        if is_secret_name(name):
            raise ValueError(f"{name} names a secret: it is never handed to a candidate")
        env[name] = value
    return env


def library_path(lib_dirs: tuple[Path, ...], env: Mapping[str, str]) -> str:
    """``env``'s ``LD_LIBRARY_PATH`` with ``lib_dirs`` first (a cuDNN backend layer's library:
    a stage's, and the zygote's of that backend)."""
    inherited = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    return os.pathsep.join([*map(str, lib_dirs), *inherited])
