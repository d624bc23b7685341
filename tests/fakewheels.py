"""Constructed candidate wheels for fault tests: a real, installable wheel of
``nvidia-cudnn-frontend`` whose ``cudnn`` package does what the test needs (hang, crash)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(dest_dir: Path, version: str, init_py: str) -> Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    dist = f"nvidia_cudnn_frontend-{version}"
    files = {
        "cudnn/__init__.py": init_py.encode(),
        f"{dist}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: nvidia-cudnn-frontend\nVersion: {version}\n"
        ).encode(),
        f"{dist}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: fe-ci-tests\n"
            b"Root-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = [_record_line(n, d) for n, d in files.items()] + [f"{dist}.dist-info/RECORD,,"]
    files[f"{dist}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    path = dest_dir / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


HANG = "import time\ntime.sleep(3600)\n"
SEGFAULT = (
    "import ctypes, sys\n"
    "print('cudnn: about to crash', file=sys.stderr, flush=True)\n"
    "ctypes.string_at(0)\n"
)


def sleepy(seconds: float) -> str:
    """A candidate whose import takes ``seconds``: long enough to act on a runner mid-job."""
    return f"import time\ntime.sleep({seconds})\n"
