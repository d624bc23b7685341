"""Dashboard pages while wheels upload: page latency idle, then with uploads of the real wheel.

    .venv/bin/python bench/pages_under_load.py [--uploads 8] [--readers 2] [--every 0.25]
        [--duration 15] [--rounds 3] [--builds 200] [--cpus 0,1] [--set FE_CI_NAME=VALUE ...]
        [--json FILE]

Seeds ``--builds`` builds (``bench/dashboard_bench.py``'s seeding: every dashboard state), starts a
real ``fe-ci serve`` on 127.0.0.1 over them, pinned to ``--cpus`` with ``taskset`` (empty: not
pinned), and has ``--readers`` clients GET ``/`` or ``/builds/{id}`` (a failed build's page, the
heaviest) every ``--every`` seconds (at once when the last answer came later), each over its own
keep-alive connection. Paced, not back to back: idle, the readers do not queue behind each other,
so the idle figure is the pages' own latency and the loaded one shows what the uploads add.

1. idle, for ``--duration`` seconds;
2. while ``--uploads`` clients post the registry's ``nvidia-cudnn-frontend`` 1.32.0 wheel (11.6 MB,
   1,357 members; downloaded once by ``testkit.registry``) to ``/validate`` back to back, for
   ``--duration`` seconds;

``--rounds`` times, so that a change in what else the host runs falls on both phases alike.

The uploaders run in a process of their own, so their sending never holds the readers' GIL.
Prints, and writes with ``--json``, each page's p50/p95/max in milliseconds in both phases and
the ratio of the p95s (over all rounds, and per round), the handler's own time
(``Server-Timing``), uploads accepted and refused, and the load average of the machine in each
phase (the figures are only as quiet as the host: with 2 cores, a load over 2 means waiting).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.dashboard_bench import seed_database
from bench.load import quantiles
from testkit import loopback
from testkit.registry import registry_wheel
from testkit.service import SUBMIT, Service, service_env

Samples = dict[str, list[float]]


def start_service(data: Path, cpus: str, settings: list[str]) -> Service:
    pinned = ["taskset", "-c", cpus] if cpus and shutil.which("taskset") else []
    command = [*pinned, sys.executable, "-m", "cli.main", "serve", "--port", "{port}"]
    # every accepted upload stays queued (no runner): the queue caps would refuse past 100
    caps = {"FE_CI_MAX_QUEUED_PER_TOKEN": "1000000", "FE_CI_MAX_QUEUED_BUILDS": "1000000"}
    env = service_env(data, **{**caps, **dict(s.split("=", 1) for s in settings)})
    return Service(data_dir=data, env=env, command=command).start()


def read_pages(
    url: str, paths: list[str], readers: int, duration_s: float, every_s: float
) -> tuple[Samples, Samples, dict[str, int]]:
    """``readers`` clients GET a random one of ``paths`` every ``every_s`` (at once when the
    last answer came later) for ``duration_s``; (round-trip seconds per path, handler seconds
    per path, errors)."""
    rtt: Samples = {p: [] for p in paths}
    handler: Samples = {p: [] for p in paths}
    errors: Counter[str] = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + duration_s

    def reader(seed: int) -> None:
        rnd = random.Random(seed)
        due = time.monotonic() + every_s * seed / readers  # the readers spread over a period
        with loopback.client(base_url=url, timeout=60) as http:
            while (now := time.monotonic()) < deadline:
                time.sleep(max(0.0, due - now))
                due = max(due + every_s, time.monotonic())
                path = rnd.choice(paths)
                start = time.perf_counter()
                try:
                    resp = http.get(path)
                except httpx.HTTPError as exc:
                    with lock:
                        errors[f"{path} {type(exc).__name__}"] += 1
                    continue
                took = time.perf_counter() - start
                dur = resp.headers.get("server-timing", "").partition("dur=")[2]
                with lock:
                    if resp.status_code != 200:
                        errors[f"{path} http_{resp.status_code}"] += 1
                        continue
                    rtt[path].append(took)
                    if dur:
                        handler[path].append(float(dur) / 1000)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rtt, handler, dict(errors)


def upload_loop(url: str, wheel: Path, uploads: int, until: float, out: Queue[Any]) -> None:
    """In its own process: ``uploads`` threads post ``wheel`` back to back until ``until``."""
    outcome: Counter[str] = Counter()
    latency: list[float] = []
    lock = threading.Lock()

    def uploader() -> None:
        auth = {"Authorization": f"Bearer {SUBMIT}"}
        with loopback.client(base_url=url, headers=auth, timeout=600) as http:
            while time.time() < until:
                start = time.perf_counter()
                try:
                    with wheel.open("rb") as fh:
                        resp = http.post("/validate", files={"wheel": (wheel.name, fh)})
                    key = f"http_{resp.status_code}"
                except httpx.HTTPError as exc:
                    key = type(exc).__name__
                with lock:
                    outcome[key] += 1
                    if key == "http_202":
                        latency.append(time.perf_counter() - start)

    threads = [threading.Thread(target=uploader) for _ in range(uploads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put({"outcome": dict(outcome), "latency_s": latency})


@dataclass
class Phase:
    """What the readers saw in one phase (and the uploads beside them, if any)."""

    rtt: Samples
    handler: Samples
    errors: dict[str, int]
    loadavg: tuple[float, float]
    uploads: Counter[str] = field(default_factory=Counter)
    upload_s: list[float] = field(default_factory=list)


def phase(svc: Service, paths: list[str], args: argparse.Namespace, wheel: Path | None) -> Phase:
    """Readers for ``--duration`` seconds, with the uploaders beside them when ``wheel``."""
    ctx = multiprocessing.get_context("fork")
    queue: Queue[Any] = ctx.Queue()
    proc = None
    if wheel is not None:
        until = time.time() + args.duration + 2
        proc = ctx.Process(target=upload_loop, args=(svc.url, wheel, args.uploads, until, queue))
        proc.start()
        time.sleep(2)  # the uploads are streaming before the first timed read
    load_before = os.getloadavg()[0]
    rtt, handler, errors = read_pages(svc.url, paths, args.readers, args.duration, args.every)
    result = Phase(rtt, handler, errors, (round(load_before, 2), round(os.getloadavg()[0], 2)))
    if proc is not None:
        uploaded = queue.get(timeout=900)
        proc.join(60)
        result.uploads.update(uploaded["outcome"])
        result.upload_s = uploaded["latency_s"]
    return result


def summary(phases: list[Phase], paths: list[str]) -> dict[str, Any]:
    """The phases' samples together: quantiles per page, errors, uploads, load averages."""
    out: dict[str, Any] = {
        "loadavg_1m": [p.loadavg for p in phases],
        "reads": {path: sum(len(p.rtt[path]) for p in phases) for path in paths},
        "read_ms": {
            path: quantiles([x for p in phases for x in p.rtt[path]], 1000.0) for path in paths
        },
        "handler_ms": {
            path: quantiles([x for p in phases for x in p.handler[path]], 1000.0) for path in paths
        },
        "read_errors": dict(sum((Counter(p.errors) for p in phases), Counter())),
    }
    if any(p.uploads for p in phases):
        out["uploads"] = dict(sum((p.uploads for p in phases), Counter()))
        out["upload_s"] = quantiles([x for p in phases for x in p.upload_s])
    return out


def p95_ratio(idle: dict[str, Any], loaded: dict[str, Any]) -> dict[str, float]:
    return {
        path: round(loaded["read_ms"][path]["p95"] / idle["read_ms"][path]["p95"], 2)
        for path in idle["read_ms"]
        if idle["read_ms"][path] and loaded["read_ms"][path]
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--uploads", type=int, default=8, help="concurrent upload clients")
    ap.add_argument("--readers", type=int, default=2, help="concurrent page readers")
    ap.add_argument("--every", type=float, default=0.25, help="seconds between a reader's GETs")
    ap.add_argument("--duration", type=float, default=15.0, help="seconds per phase")
    ap.add_argument("--rounds", type=int, default=3, help="idle then loaded, this many times")
    ap.add_argument("--builds", type=int, default=200, help="builds seeded before it starts")
    ap.add_argument("--cpus", default="0,1", help="taskset's CPU list for the service ('' none)")
    ap.add_argument("--set", action="append", default=[], help="a service setting, K=V")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    wheel = registry_wheel("1.32.0")
    idle: list[Phase] = []
    loaded: list[Phase] = []
    with tempfile.TemporaryDirectory(prefix="fe-ci-pages-") as tmp:
        data = Path(tmp) / "data"
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the JSON alone
            ids = seed_database(data, args.builds)
        svc = start_service(data, args.cpus, args.set)
        paths = ["/", f"/builds/{ids['newest_fail']}"]
        try:
            read_pages(svc.url, paths, 1, 2.0, 0.0)  # warm-up: templates compiled, caches filled
            for _ in range(args.rounds):
                idle.append(phase(svc, paths, args, None))
                loaded.append(phase(svc, paths, args, wheel))
        finally:
            svc.stop()
    both = summary(idle, paths), summary(loaded, paths)
    result = {
        "command": " ".join(["bench/pages_under_load.py", *sys.argv[1:]]),
        "wheel": {"name": wheel.name, "bytes": wheel.stat().st_size},
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "idle": both[0],
        "under_uploads": both[1],
        "p95_ratio": p95_ratio(*both),
        "p95_ratio_by_round": [
            p95_ratio(summary([i], paths), summary([u], paths))
            for i, u in zip(idle, loaded, strict=True)
        ],
    }
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 1 if both[0]["read_errors"] or both[1]["read_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
