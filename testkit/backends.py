"""Constructed cuDNN backend wheels (``nvidia-cudnn-cu13``) for a local wheelhouse: the real
wheel is about 600 MB, so a test installs a small one of the same name and layout whose
``nvidia/cudnn/lib/libcudnn.so.9`` is a real shared library of the host (zlib, renamed): a
process that dlopens ``libcudnn.so.9`` through ``LD_LIBRARY_PATH`` maps it, as it would the real
one. And a broken one: a wheel of that name that no installer accepts."""

from __future__ import annotations

import os
from pathlib import Path

from testkit.wheels import metadata, wheel_bytes

PACKAGE = "nvidia_cudnn_cu13"
HOST_LIB = Path("/lib/x86_64-linux-gnu/libz.so.1")  # any real ELF shared object of the host
# what the real wheel declares (9.28.1.4's METADATA): the CUDA library its libcudnn links, which
# the host's torch already brings; never in a backend-only wheelhouse
REQUIRES = ("nvidia-cublas",)
WHEEL = b"Wheel-Version: 1.0\nGenerator: fe-ci-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
# a frontend whose backend call loads libcudnn the way the real one does: the first
# ``libcudnn.so.9`` the dynamic loader finds (``LD_LIBRARY_PATH`` first)
FRONTEND_INIT = (
    "import ctypes\n"
    "def backend_version():\n"
    "    ctypes.CDLL('libcudnn.so.9')\n"
    "    return 92801\n"
    "def backend_version_string():\n"
    "    return str(backend_version())\n"
)


def backend_wheel(dest_dir: Path, version: str = "9.28.1.4", *, pad_mb: int = 0) -> Path:
    """An installable ``nvidia-cudnn-cu13`` wheel of ``version`` holding a loadable libcudnn
    (and ``pad_mb`` MiB of incompressible bytes beside it, for a benchmark)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    info = f"{PACKAGE}-{version}.dist-info"
    members = {
        "nvidia/cudnn/lib/libcudnn.so.9": HOST_LIB.read_bytes(),
        "nvidia/cudnn/include/cudnn_version.h": b"#define CUDNN_MAJOR 9\n",
        f"{info}/METADATA": metadata(version, name="nvidia-cudnn-cu13", requires=REQUIRES),
        f"{info}/WHEEL": WHEEL,
    }
    if pad_mb > 0:
        members["nvidia/cudnn/lib/libcudnn_pad.bin"] = os.urandom(pad_mb << 20)
    path = dest_dir / f"{PACKAGE}-{version}-py3-none-any.whl"
    path.write_bytes(wheel_bytes(members, record=info))
    return path


def broken_backend_wheel(dest_dir: Path, version: str = "9.28.1.4") -> Path:
    """A file named as that wheel that is no zip at all: the installer refuses it."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / f"{PACKAGE}-{version}-py3-none-any.whl"
    path.write_bytes(b"this is not a wheel\n" * 64)
    return path
