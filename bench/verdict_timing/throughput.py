"""Requests per second of the service's pages on one uvicorn worker over a seeded database, against
a minimal FastAPI endpoint on the same machine (the ceiling)."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.dashboard_bench import seed_database, start_service
from testkit import loopback
from testkit.service import free_port


def wait_until_up(url: str, tries: int = 300) -> None:
    """Until ``url`` answers at all (a server just started), 0.1 s apart."""
    for _ in range(tries):
        try:
            loopback.get(url)
            return
        except httpx.TransportError:
            time.sleep(0.1)


MINIMAL_APP = """
from fastapi import FastAPI
app = FastAPI()

@app.get("/ping")
def ping() -> dict[str, bool]:
    return {"ok": True}
"""


def _hammer(args: tuple[str, str, float, bool]) -> int:
    base, path, seconds, revalidate = args
    n = 0
    with loopback.client(base_url=base, timeout=30) as client:
        for _ in range(5):
            etag = client.get(path).headers.get("etag")
        headers = {"If-None-Match": etag} if revalidate and etag else {}
        expect = 304 if headers else 200
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            status = client.get(path, headers=headers).status_code
            if status != expect:
                raise RuntimeError(f"GET {path}: {status}, expected {expect}")
            n += 1
    return n


def rps(base: str, path: str, seconds: float, clients: int = 2, revalidate: bool = False) -> float:
    """Requests per second from ``clients`` processes, each one keep-alive connection.

    ``revalidate``: each request carries the ETag of the first answer (``If-None-Match``).
    """
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(clients) as pool:
        counts = pool.map(_hammer, [(base, path, seconds, revalidate)] * clients)
    return sum(counts) / seconds


def throughput(tmp: Path, builds: int, seconds: float, reps: int = 3) -> dict[str, list[float]]:
    data = tmp / "tp-data"
    ids = seed_database(data, builds)
    (tmp / "minimal_app.py").write_text(MINIMAL_APP)
    mport = free_port()
    svc = start_service(data)
    cmd = [sys.executable, "-m", "uvicorn", "minimal_app:app", "--port", str(mport)]
    cmd += ["--host", "127.0.0.1", "--workers", "1", "--no-access-log", "--log-level", "warning"]
    minimal = subprocess.Popen(cmd, cwd=tmp)
    out: dict[str, list[float]] = {}
    try:
        wait_until_up(f"http://127.0.0.1:{mport}/ping")
        report = f"/api/builds/{ids['newest_pass']}"
        targets: list[tuple[str, str, str, bool]] = [
            ("minimal FastAPI /ping (ceiling)", f"http://127.0.0.1:{mport}", "/ping", False),
            (f"GET {report}", svc.url, report, False),
            (f"GET {report} If-None-Match (304)", svc.url, report, True),
            ("GET /", svc.url, "/", False),
        ]  # fmt: skip
        for _ in range(reps):  # interleaved, so drift in the machine's load hits all alike
            for label, base, path, revalidate in targets:
                out.setdefault(label, []).append(rps(base, path, seconds, revalidate=revalidate))
    finally:
        svc.stop()
        minimal.terminate()
        minimal.wait(timeout=15)
    return out
