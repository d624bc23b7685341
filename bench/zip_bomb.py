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
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit import loopback
from testkit.service import SUBMIT, Service, service_env
from testkit.wheels import make_directory_bomb


class Sampler:
    """The service's RSS every ``period_s``, in a thread; ``peak()`` since the last ``reset()``."""

    def __init__(self, svc: Service, period_s: float = 0.02) -> None:
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


def post(svc: Service, wheel: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    with wheel.open("rb") as fh:
        resp = loopback.post(
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


def run(svc: Service, wheel: Path, concurrent: int) -> dict[str, Any]:
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
        data = root / "data"
        svc = Service(data_dir=data, env=service_env(data, FE_CI_MAX_UPLOAD_MB="1024")).start()
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
