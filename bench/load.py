"""Closed-loop load: concurrent wheel uploads while readers hit the dashboard and the API.

    .venv/bin/python bench/load.py [--uploads 20] [--size-mb 300] [--readers 4] [--duration 60]

Starts a real ``fe-ci serve`` on 127.0.0.1 over a fresh data dir, writes one wheel-shaped file of
``--size-mb`` (a valid ``nvidia-cudnn-frontend`` wheel whose bulk is one incompressible stored
member), then for ``--duration`` seconds keeps ``--uploads`` clients each posting it to
``/validate`` back to back, while ``--readers`` clients GET ``/``, ``/api/builds`` and
``/api/builds/{id}`` as fast as they are answered. Uploads in flight at the deadline finish.
Samples the service's RSS from /proc every 0.25 s. Afterwards checks the store: one build row and
one job per accepted upload, every blob referenced by a build, nothing left in the uploads temp
dir. Prints a JSON summary; removes everything it wrote unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit import loopback
from testkit.service import SUBMIT, Service, service_env
from testkit.wheels import make_big_wheel


def start_service(data_dir: Path, max_upload_mb: int) -> Service:
    # every accepted upload stays queued (no runner): the queue caps would refuse past 100
    env = service_env(
        data_dir,
        FE_CI_MAX_UPLOAD_MB=str(max_upload_mb),
        FE_CI_MAX_QUEUED_PER_TOKEN="1000000",
        FE_CI_MAX_QUEUED_BUILDS="1000000",
    )
    return Service(data_dir=data_dir, env=env).start()


@dataclass
class LoadResult:
    uploads: int
    size_mb: int
    readers: int
    duration_s: float
    elapsed_s: float = 0.0
    uploads_ok: int = 0
    upload_errors: Counter[str] = field(default_factory=Counter)
    upload_mb_per_s: float = 0.0
    upload_latency_s: dict[str, float] = field(default_factory=dict)
    reads_ok: Counter[str] = field(default_factory=Counter)
    read_errors: Counter[str] = field(default_factory=Counter)
    reads_per_s: float = 0.0
    read_latency_ms: dict[str, float] = field(default_factory=dict)
    rss_mb: dict[str, float] = field(default_factory=dict)
    rss_samples_mb: list[tuple[float, float]] = field(default_factory=list)
    consistency: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return sum(self.upload_errors.values()) + sum(self.read_errors.values())

    def to_json(self) -> str:
        data = {
            name: dict(value) if isinstance(value, Counter) else value
            for name, value in vars(self).items()
        }
        data["errors"] = self.errors
        return json.dumps(data, indent=2)


def quantiles(values: list[float], scale: float = 1.0) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def q(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * scale, 3)

    return {"p50": q(0.5), "p95": q(0.95), "max": round(ordered[-1] * scale, 3)}


def check_store(data_dir: Path) -> dict[str, Any]:
    """Counts that must match after the load, and files that must not be there."""
    with sqlite3.connect(data_dir / "fe-ci.sqlite3") as conn:
        builds = conn.execute("SELECT count(*) FROM builds").fetchone()[0]
        jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        builds_without_job = conn.execute(
            "SELECT count(*) FROM builds b WHERE NOT EXISTS "
            "(SELECT 1 FROM jobs j WHERE j.build_id = b.id)"
        ).fetchone()[0]
        shas = {row[0] for row in conn.execute("SELECT DISTINCT sha256 FROM builds")}
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
    blobs = {p.name.removesuffix(".whl") for p in (data_dir / "blobs").rglob("*.whl")}
    tmp = data_dir / "tmp"
    return {
        "builds": builds,
        "jobs": jobs,
        "builds_without_job": builds_without_job,
        "blobs": len(blobs),
        "orphan_blobs": sorted(blobs - shas),
        "missing_blobs": sorted(shas - blobs),
        # files, not directories: a live service holds an (empty) area of its own there
        "tmp_files": sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file()),
        "integrity": integrity,
    }


def run_load(
    svc: Service,
    wheel: Path,
    *,
    uploads: int,
    readers: int,
    duration_s: float,
    sample_s: float = 0.25,
) -> LoadResult:
    size_mb = wheel.stat().st_size // (1 << 20)
    result = LoadResult(uploads=uploads, size_mb=size_mb, readers=readers, duration_s=duration_s)
    lock = threading.Lock()
    stop_sampling = threading.Event()
    upload_lat: list[float] = []
    read_lat: list[float] = []
    build_ids: list[int] = []
    auth = {"Authorization": f"Bearer {SUBMIT}"}
    rss_base = svc.rss_bytes()
    t0 = time.monotonic()
    deadline = t0 + duration_s

    def sampler() -> None:
        while not stop_sampling.is_set():
            rss = svc.rss_bytes() / (1 << 20)
            result.rss_samples_mb.append((round(time.monotonic() - t0, 2), round(rss, 1)))
            stop_sampling.wait(sample_s)

    def uploader() -> None:
        with loopback.client(base_url=svc.url, headers=auth, timeout=600) as http:
            while time.monotonic() < deadline:
                start = time.monotonic()
                try:
                    with wheel.open("rb") as fh:
                        resp = http.post("/validate", files={"wheel": (wheel.name, fh)})
                except httpx.HTTPError as exc:
                    with lock:
                        result.upload_errors[type(exc).__name__] += 1
                    continue
                with lock:
                    if resp.status_code == 202:
                        result.uploads_ok += 1
                        upload_lat.append(time.monotonic() - start)
                        build_ids.append(int(resp.json()["build_id"]))
                    else:
                        result.upload_errors[f"http_{resp.status_code}"] += 1

    def reader(seed: int) -> None:
        rnd = random.Random(seed)
        with loopback.client(base_url=svc.url, timeout=60) as http:
            while time.monotonic() < deadline:
                with lock:
                    known = build_ids[-50:]
                choice = rnd.choice(["/", "/api/builds", "build"])
                path = f"/api/builds/{rnd.choice(known)}" if choice == "build" and known else None
                path = path or ("/" if choice == "/" else "/api/builds")
                kind = "/api/builds/{id}" if path.count("/") == 3 else path
                start = time.monotonic()
                try:
                    resp = http.get(path)
                except httpx.HTTPError as exc:
                    with lock:
                        result.read_errors[f"{kind} {type(exc).__name__}"] += 1
                    continue
                with lock:
                    if resp.status_code == 200:
                        result.reads_ok[kind] += 1
                        read_lat.append(time.monotonic() - start)
                    else:
                        result.read_errors[f"{kind} http_{resp.status_code}"] += 1

    threads = [threading.Thread(target=sampler)]
    threads += [threading.Thread(target=uploader) for _ in range(uploads)]
    threads += [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    result.elapsed_s = round(time.monotonic() - t0, 2)
    stop_sampling.set()
    threads[0].join()
    result.upload_mb_per_s = round(result.uploads_ok * size_mb / result.elapsed_s, 1)
    result.upload_latency_s = quantiles(upload_lat)
    result.reads_per_s = round(sum(result.reads_ok.values()) / result.elapsed_s, 1)
    result.read_latency_ms = quantiles(read_lat, 1000.0)
    samples = [mb for _, mb in result.rss_samples_mb]
    result.rss_mb = {
        "before": round(rss_base / (1 << 20), 1),
        "max": max(samples, default=0.0),
        "after": round(svc.rss_bytes() / (1 << 20), 1),
    }
    result.consistency = check_store(svc.data_dir)
    result.consistency["accepted_uploads"] = result.uploads_ok
    return result


def consistent(result: LoadResult) -> bool:
    c = result.consistency
    return (
        c["builds"] == c["jobs"] == result.uploads_ok
        and c["builds_without_job"] == 0
        and not c["orphan_blobs"]
        and not c["missing_blobs"]
        and not c["tmp_files"]
        and c["integrity"] == "ok"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--uploads", type=int, default=20, help="concurrent upload clients")
    ap.add_argument("--size-mb", type=int, default=300, help="size of the uploaded wheel")
    ap.add_argument("--readers", type=int, default=4, help="concurrent reading clients")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds to keep starting work")
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the data dir and the wheel")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fe-ci-load-", dir=args.dir))
    try:
        wheel = make_big_wheel(root / "wheel", args.size_mb)
        svc = start_service(root / "data", args.size_mb + 16)
        try:
            result = run_load(
                svc, wheel, uploads=args.uploads, readers=args.readers, duration_s=args.duration
            )
        finally:
            svc.stop()
        print(result.to_json())
        ok = result.errors == 0 and consistent(result)
        print(f"{'OK' if ok else 'FAILED'}: see the JSON above", file=sys.stderr)
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
