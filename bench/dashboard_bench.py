"""Dashboard latency with many builds: a real ``fe-ci serve`` over a seeded SQLite database.

    .venv/bin/python bench/dashboard_bench.py [--builds 10000] [--requests 200] [--data DIR]

``--data DIR`` keeps the seeded database in ``DIR/seed`` and reuses it on the next run (seeding
100,000 builds takes minutes); each run serves a fresh copy of it in ``DIR/run``, so what the
service changes (the sweeper, a migration) never leaks into the next run. Seeded leases and GPU
waits run from the time of seeding (a day), so reuse a seed within the day it was made.

Seeds ``--builds`` builds cycling through every state of testkit/dashboard_data/scenarios.py (each
finished build with its jobs, stages, checks, capabilities, drift rows and 80 refusal rows), starts
the service on 127.0.0.1, and times sequential GETs over one keep-alive connection after a warm-up.
Prints a Markdown table: round-trip median, p95 and max in milliseconds as the client sees them,
and the handler's own time (queries and rendering, from the ``Server-Timing`` header).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import func, select

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from service.db import make_engine, migrate
from service.models import Build
from testkit import loopback
from testkit.dashboard_data import seed_many
from testkit.service import Service, service_env


def start_service(data: Path) -> Service:
    """A real service over the seeded ``data``, with the benchmarks' (and tests') settings."""
    return Service(data_dir=data, env=service_env(data)).start()


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


def seed_database(data: Path, builds: int, *, reuse: bool = False) -> dict[str, int]:
    """A migrated SQLite database in ``data`` with ``builds`` builds; prints what it made.

    With ``reuse``, a database already in ``data`` that holds ``builds`` builds is kept as it is.
    Returns the ids the benchmarks address: ``oldest``, ``newest_pass``, ``newest_fail``.
    """
    data.mkdir(parents=True, exist_ok=True)
    path = data / "fe-ci.sqlite3"
    url = f"sqlite:///{path}"
    if reuse and path.exists():
        engine = make_engine(url)
        with engine.connect() as conn:
            total = conn.scalar(select(func.count(Build.id)))
        engine.dispose()
        if total != builds:
            raise SystemExit(f"{path} holds {total} builds, not {builds}: use another --data")
        print(f"reused {total} seeded builds in {path}")
        return _bench_ids(url)
    migrate(url)
    engine = make_engine(url)
    t0 = time.perf_counter()
    seed_many(engine, builds)
    seeded_s = time.perf_counter() - t0
    with engine.connect() as conn:
        total = conn.scalar(select(func.count(Build.id)))
    engine.dispose()
    size_mb = path.stat().st_size / 1e6
    print(f"seeded {total} builds in {seeded_s:.1f} s ({size_mb:.0f} MB of SQLite)")
    return _bench_ids(url)


def _bench_ids(url: str) -> dict[str, int]:
    engine = make_engine(url)
    with engine.connect() as conn:
        ids = {
            "newest_pass": conn.scalar(select(func.max(Build.id)).where(Build.verdict == "pass")),
            "newest_fail": conn.scalar(select(func.max(Build.id)).where(Build.verdict == "fail")),
            "oldest": conn.scalar(select(func.min(Build.id))),
        }
    engine.dispose()
    return {k: int(v) for k, v in ids.items()}


def _serve_copy(seed: Path, run: Path) -> None:
    """A fresh copy of the seeded database (WAL checkpointed into the file) for one run, migrated
    to this tree's head before the service starts (a newer index is built here, not timed)."""
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    shutil.copy2(seed / "fe-ci.sqlite3", run / "fe-ci.sqlite3")
    t0 = time.perf_counter()
    migrate(f"sqlite:///{run / 'fe-ci.sqlite3'}")
    print(f"copied and migrated to head in {time.perf_counter() - t0:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--data",
        type=Path,
        help="keep the seeded database here and reuse it next time (default: a temp dir)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fe-ci-bench-") as tmp:
        if args.data is None:
            data = Path(tmp) / "data"
            ids = seed_database(data, args.builds)
        else:
            ids = seed_database(args.data / "seed", args.builds, reuse=True)
            data = args.data / "run"
            _serve_copy(args.data / "seed", data)
        oldest, newest_pass, newest_fail = ids["oldest"], ids["newest_pass"], ids["newest_fail"]
        svc = start_service(data)
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
            with loopback.client(base_url=svc.url, timeout=30) as client:
                for path in paths:
                    print(measure(client, path, args.requests), flush=True)
        finally:
            svc.stop()


if __name__ == "__main__":
    main()
