"""Constructed wheels of ``nvidia-cudnn-frontend``: real, installable zip files whose ``cudnn``
package does what a test or a benchmark needs (hang, crash, sleep, be large, be malformed).

One factory: ``wheel_bytes`` builds the archive from its members, ``make_wheel`` writes an
installable one (with a RECORD), ``make_big_wheel`` streams a large one to disk,
``make_directory_bomb`` writes one whose end record lies about its central directory. The registry's
real wheels and their environments are in ``testkit.registry``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import struct
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

DIST = "nvidia_cudnn_frontend"
WHEEL_FILE = (
    b"Wheel-Version: 1.0\nGenerator: fe-ci-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
)


def wheel_name(version: str) -> str:
    return f"{DIST}-{version}-py3-none-any.whl"


def dist_info(version: str) -> str:
    return f"{DIST}-{version}.dist-info"


def metadata(
    version: str, name: str = "nvidia-cudnn-frontend", requires: tuple[str, ...] = ()
) -> bytes:
    """METADATA of ``name==version``, declaring ``requires`` as its ``Requires-Dist`` lines."""
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
    lines += [f"Requires-Dist: {req}\n" for req in requires]
    return "".join(lines).encode()


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def wheel_bytes(members: Mapping[str, bytes], *, record: str | None = None) -> bytes:
    """A zip of ``members``; with ``record`` (a ``.dist-info`` dir) a RECORD of them too."""
    files = dict(members)
    if record is not None:
        lines = [record_line(n, d) for n, d in files.items()] + [f"{record}/RECORD,,"]
        files[f"{record}/RECORD"] = ("\n".join(lines) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def frontend_members(
    version: str, init_py: str, requires: tuple[str, ...] = ()
) -> dict[str, bytes]:
    """The members of a minimal frontend wheel: ``cudnn/__init__.py``, METADATA (declaring
    ``requires``) and WHEEL."""
    info = dist_info(version)
    return {
        "cudnn/__init__.py": init_py.encode(),
        f"{info}/METADATA": metadata(version, requires=requires),
        f"{info}/WHEEL": WHEEL_FILE,
    }


def make_wheel(
    dest_dir: Path, version: str, init_py: str, *, requires: tuple[str, ...] = ()
) -> Path:
    """An installable frontend wheel of ``version`` in ``dest_dir``; ``cudnn`` is ``init_py``,
    and ``requires`` (real distributions of the package index) its declared dependencies."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / wheel_name(version)
    members = frontend_members(version, init_py, requires)
    path.write_bytes(wheel_bytes(members, record=dist_info(version)))
    return path


def make_big_wheel(dest_dir: Path, size_mb: int, version: str = "9.9.0") -> Path:
    """A wheel that passes the service's checks, ``size_mb`` large (one incompressible stored
    member), written in 1 MiB chunks so it is never held in memory."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / wheel_name(version)
    members = frontend_members(version, "")
    payload = hashlib.sha256()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        with zf.open("cudnn/payload.bin", "w", force_zip64=True) as fh:
            for _ in range(size_mb):
                block = os.urandom(1 << 20)
                payload.update(block)
                fh.write(block)
        digest = base64.urlsafe_b64encode(payload.digest()).rstrip(b"=").decode()
        lines = [f"cudnn/payload.bin,sha256={digest},{size_mb << 20}"]
        for name, data in members.items():
            zf.writestr(name, data)
            lines.append(record_line(name, data))
        lines.append(f"{dist_info(version)}/RECORD,,")
        zf.writestr(f"{dist_info(version)}/RECORD", "\n".join(lines) + "\n")
    return path


HANG = "import time\ntime.sleep(3600)\n"
SEGFAULT = (
    "import ctypes, sys\n"
    "print('cudnn: about to crash', file=sys.stderr, flush=True)\n"
    "ctypes.string_at(0)\n"
)


# A candidate whose ``import cudnn`` raises: a broken build (a verdict of fail, never a pass).
BROKEN = "raise RuntimeError('cudnn was built without its kernels')\n"
# ... raises as a release before 1.15.0 does on a host without libcudnn (the host's gap).
NO_LIBCUDNN = (
    "raise OSError('libcudnn.so.8: cannot open shared object file: No such file or directory')\n"
)


def sleepy(seconds: float) -> str:
    """A candidate whose import takes ``seconds``: long enough to act on a runner mid-job."""
    return f"import time\ntime.sleep({seconds})\n"


_LOCAL = struct.Struct("<4s2B4HL2L2H")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_END = struct.Struct("<4s4H2LH")


def make_directory_bomb(
    dest_dir: Path, members: int, declared: int, version: str = "9.9.0", *, record: bool = False
) -> Path:
    """A frontend wheel with ``members`` empty members (plus METADATA and WHEEL, and a RECORD
    listing them all when ``record``) whose end record declares ``declared`` members; written by
    hand, as ``zipfile`` cannot lie."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    dist = f"{DIST}-{version}"
    path = dest_dir / wheel_name(version)
    files = [
        (
            f"{dist}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: nvidia-cudnn-frontend\nVersion: {version}\n".encode(),
        ),
        (f"{dist}.dist-info/WHEEL", b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"),
    ]
    central = bytearray()
    offset = 0
    with path.open("wb") as out:
        chunk = bytearray()

        def add(name: bytes, data: bytes) -> None:
            nonlocal offset
            crc = zlib.crc32(data)
            local = _LOCAL.pack(
                b"PK\x03\x04", 20, 0, 0, 0, 0, 0x21, crc, len(data), len(data), len(name), 0
            )
            central.extend(
                _CENTRAL.pack(
                    b"PK\x01\x02",
                    20,
                    3,
                    20,
                    0,
                    0,
                    0,
                    0,
                    0x21,
                    crc,
                    len(data),
                    len(data),
                    len(name),
                    0,
                    0,
                    0,
                    0,
                    0o100644 << 16,
                    offset,
                )
            )
            central.extend(name)
            chunk.extend(local + name + data)
            offset += len(local) + len(name) + len(data)

        for name, data in files:
            add(name.encode(), data)
        empty = base64.urlsafe_b64encode(hashlib.sha256().digest()).rstrip(b"=")
        listing = bytearray()
        for name, data in files:
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            listing += b"%s,sha256=%s,%d\n" % (name.encode(), digest, len(data))
        for i in range(members):
            member = f"cudnn/{i:07x}".encode()
            add(member, b"")
            if record:
                listing += b"%s,sha256=%s,0\n" % (member, empty)
            if len(chunk) > 1 << 20:
                out.write(chunk)
                chunk.clear()
        if record:
            listing += f"{dist}.dist-info/RECORD,,\n".encode()
            add(f"{dist}.dist-info/RECORD".encode(), bytes(listing))
        out.write(chunk)
        out.write(central)
        count = declared & 0xFFFF
        out.write(_END.pack(b"PK\x05\x06", 0, 0, count, count, len(central), offset, 0))
    return path
