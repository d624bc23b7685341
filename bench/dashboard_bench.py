"""Dashboard latency with many builds: a real ``fe-ci serve`` over a seeded SQLite database.

    .venv/bin/python bench/dashboard_bench.py [--builds 10000] [--requests 200]

Seeds ``--builds`` builds cycling through every state of tests/dashboard_data.py (each finished
build with its jobs, stages, checks, capabilities, drift rows and 80 refusal rows), starts the
service on 127.0.0.1, and times sequential GETs over one keep-alive connection after a warm-up.
Prints a Markdown table: round-trip median, p95 and max in milliseconds as the client sees them,
and the handler's own time (queries and rendering, from the ``Server-Timing`` header).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from service.db import make_engine, migrate  # noqa: E402
from service.models import Build  # noqa: E402
from tests.dashboard_data import seed_many  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service_env(data: Path) -> dict[str, str]:
    """The environment of a benchmark's service on ``data``: its own tokens, no GPU families."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_")}
    env.update(
        FE_CI_DATA_DIR=str(data),
        FE_CI_SUBMIT_TOKEN="bench-submit-token",
        FE_CI_RUNNER_TOKEN="bench-runner-token",
        FE_CI_WEBHOOK_SECRET="bench-webhook-secret",
        FE_CI_GPU_ARCHS="",
        PYTHONPATH=str(ROOT),
    )
    return env


def start_service(data: Path, port: int) -> subprocess.Popen[bytes]:
    env = service_env(data)
    log = open(data.parent / "service.log", "ab")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner.cli", "serve", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/builds?limit=1").status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the service did not start; see service.log")


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def _server_ms(resp: httpx.Response) -> float | None:
    """The handler's own time (queries + rendering) from the ``Server-Timing`` header."""
    header = resp.headers.get("server-timing", "")
    _, _, dur = header.partition("dur=")
    return float(dur) if dur else None


def measure(client: httpx.Client, path: str, n: int) -> str:
    for _ in range(5):
        client.get(path)
    times: list[float] = []
    server: list[float] = []
    size = 0
    for _ in range(n):
        t0 = time.perf_counter()
        resp = client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        resp.raise_for_status()
        size = len(resp.content)
        if (ms := _server_ms(resp)) is not None:
            server.append(ms)
    handler = f"{statistics.median(server):.1f} / {_p95(server):.1f}" if server else "—"
    return (
        f"| `{path}` | {statistics.median(times):.1f} | {_p95(times):.1f} | {max(times):.1f} "
        f"| {handler} | {size} |"
    )


def seed_database(data: Path, builds: int) -> dict[str, int]:
    """A migrated SQLite database in ``data`` with ``builds`` builds; prints what it made.

    Returns the ids the benchmarks address: ``oldest``, ``newest_pass``, ``newest_fail``.
    """
    data.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{data / 'fe-ci.sqlite3'}"
    migrate(url)
    engine = make_engine(url)
    t0 = time.perf_counter()
    seed_many(engine, builds)
    seeded_s = time.perf_counter() - t0
    with engine.connect() as conn:
        total = conn.scalar(select(func.count(Build.id)))
        ids = {
            "newest_pass": conn.scalar(select(func.max(Build.id)).where(Build.verdict == "pass")),
            "newest_fail": conn.scalar(select(func.max(Build.id)).where(Build.verdict == "fail")),
            "oldest": conn.scalar(select(func.min(Build.id))),
        }
    engine.dispose()
    size_mb = (data / "fe-ci.sqlite3").stat().st_size / 1e6
    print(f"seeded {total} builds in {seeded_s:.1f} s ({size_mb:.0f} MB of SQLite)")
    return {k: int(v) for k, v in ids.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fe-ci-bench-") as tmp:
        data = Path(tmp) / "data"
        ids = seed_database(data, args.builds)
        oldest, newest_pass, newest_fail = ids["oldest"], ids["newest_pass"], ids["newest_fail"]
        port = free_port()
        proc = start_service(data, port)
        try:
            paths = [
                "/",
                "/?verdict=fail",
                "/?source=commit&branch=refs/heads/develop",
                f"/?cursor={oldest + 60}",
                f"/builds/{newest_pass}",
                f"/builds/{newest_fail}",
                f"/builds/{newest_pass}/live.json",
                f"/builds/{newest_fail}/junit.xml",
                "/trends",
                "/runners",
                "/",
            ]
            print(f"\n{args.requests} sequential requests each, after 5 warm-up requests\n")
            print("| page | median ms | p95 ms | max ms | handler median / p95 ms | bytes |")
            print("|---|---:|---:|---:|---:|---:|")
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                for path in paths:
                    print(measure(client, path, args.requests), flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=15)


if __name__ == "__main__":
    main()
