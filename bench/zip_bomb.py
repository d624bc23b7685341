"""The service's peak memory under the central-directory attack, against its idle memory.

    .venv/bin/python bench/zip_bomb.py [--members 2000000] [--declared 100] [--concurrent 3]

Writes a wheel whose central directory holds ``--members`` empty members while its end record
says ``--declared`` (a valid ``nvidia-cudnn-frontend`` wheel otherwise: METADATA and WHEEL come
first), starts a real ``fe-ci serve`` on 127.0.0.1 over a fresh data dir, samples its RSS from
/proc every 20 ms while idle for 2 s, then posts the wheel once, then ``--concurrent`` times at
once, and prints a JSON summary: idle RSS, peak RSS per round, the answers, the data dir's files
afterwards. Removes everything it wrote unless ``--keep``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import struct
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import httpx

from bench.load import SUBMIT, ServiceProc, start_service

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
    dist = f"nvidia_cudnn_frontend-{version}"
    path = dest_dir / f"{dist}-py3-none-any.whl"
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


class Sampler:
    """The service's RSS every ``period_s``, in a thread; ``peak()`` since the last ``reset()``."""

    def __init__(self, svc: ServiceProc, period_s: float = 0.02) -> None:
        self.svc, self.period_s = svc, period_s
        self.samples: list[int] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            self.samples.append(self.svc.rss_bytes())
            time.sleep(self.period_s)

    def reset(self) -> None:
        self.samples = []

    def peak_mb(self) -> float:
        return max(self.samples, default=0) / 2**20


def post(svc: ServiceProc, wheel: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    with wheel.open("rb") as fh:
        resp = httpx.post(
            f"{svc.url}/validate",
            files={"wheel": (wheel.name, fh)},
            headers={"Authorization": f"Bearer {SUBMIT}"},
            timeout=600,
        )
    body = resp.json()
    error = body.get("error") or {}
    return {
        "status": resp.status_code,
        "code": error.get("code"),
        "check": (error.get("detail") or {}).get("check"),
        "message": error.get("message"),
        "build_id": body.get("build_id"),
        "seconds": round(time.monotonic() - t0, 2),
    }


def run(svc: ServiceProc, wheel: Path, concurrent: int) -> dict[str, Any]:
    sampler = Sampler(svc)
    try:
        time.sleep(2.0)
        idle = sampler.peak_mb()
        rounds = []
        for n in (1, concurrent):
            sampler.reset()
            answers: list[dict[str, Any]] = []
            threads = [
                threading.Thread(target=lambda out=answers: out.append(post(svc, wheel)))
                for _ in range(n)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            time.sleep(0.5)
            peak = sampler.peak_mb()
            rounds.append(
                {
                    "uploads": n,
                    "peak_rss_mb": round(peak, 1),
                    "over_idle_mb": round(peak - idle, 1),
                    "answers": answers,
                }
            )
    finally:
        sampler.done.set()
    files = sorted(str(p.relative_to(svc.data_dir)) for p in svc.data_dir.rglob("*") if p.is_file())
    return {"idle_rss_mb": round(idle, 1), "rounds": rounds, "data_dir_files": files}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", type=int, default=2_000_000, help="members actually present")
    ap.add_argument("--declared", type=int, default=100, help="members the end record declares")
    ap.add_argument("--concurrent", type=int, default=3, help="uploads at once in round two")
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the data dir and the wheel")
    ap.add_argument("--record", action="store_true", help="write a RECORD (an honest wheel)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fe-ci-zipbomb-", dir=args.dir))
    try:
        wheel = make_directory_bomb(root / "wheel", args.members, args.declared, record=args.record)
        svc = start_service(root / "data", 1024, root / "service.log")
        try:
            result = run(svc, wheel, args.concurrent)
        finally:
            svc.stop()
        result = {
            "members": args.members,
            "declared": args.declared,
            "wheel_mb": round(wheel.stat().st_size / 2**20, 1),
            **result,
        }
        print(json.dumps(result, indent=2))
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
