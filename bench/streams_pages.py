"""``/api/builds`` latency while anonymous clients hold live streams open, against idle.

    .venv/bin/python bench/streams_pages.py [--streams 400] [--clients 40] [--watched 20]
        [--builds 200] [--duration 10] [--set FE_CI_NAME=VALUE ...]

Seeds ``--builds`` builds (``bench/dashboard_bench.py``'s seeding), starts a real ``fe-ci serve``
on 127.0.0.1 over them, submits ``--watched`` small wheels (no runner: they stay queued, so their
streams stay open), then:

1. idle: GET ``/api/builds`` back to back over one keep-alive connection for ``--duration`` s;
2. ``--streams`` streams of ``/builds/{id}/events`` attempted, spread over the watched builds and
   over ``--clients`` client addresses (127.0.0.2 and up: the whole 127/8 is loopback), those
   accepted held open; then the same GETs for ``--duration`` s.

Prints a JSON summary: the streams opened and refused (by status), each phase's p50/p95/max in
milliseconds and the ratio of the p50s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.dashboard_bench import seed_database
from testkit.service import SUBMIT, Service, service_env
from testkit.wheels import make_wheel


def latencies(url: str, duration_s: float) -> dict[str, float]:
    times: list[float] = []
    with httpx.Client(base_url=url, timeout=60) as http:
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            t0 = time.perf_counter()
            resp = http.get("/api/builds")
            times.append((time.perf_counter() - t0) * 1000)
            assert resp.status_code == 200, resp.text
    times.sort()
    return {
        "requests": len(times),
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[int(len(times) * 0.95) - 1], 1),
        "max_ms": round(times[-1], 1),
    }


def open_stream(port: int, build_id: int, source: str) -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.settimeout(60)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET /builds/{build_id}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return sock, int(data.split(b" ", 2)[1]) if data else 0


def run(svc: Service, args: argparse.Namespace, watched: list[int]) -> dict[str, Any]:
    latencies(svc.url, 2.0)  # warm-up
    idle = latencies(svc.url, args.duration)
    statuses: Counter[int] = Counter()
    with contextlib.ExitStack() as stack:
        per_client = -(-args.streams // args.clients)
        for i in range(args.streams):
            source = f"127.0.0.{2 + i // per_client}"
            sock, status = open_stream(svc.port, watched[i % len(watched)], source)
            statuses[status] += 1
            if status == 200:
                stack.callback(sock.close)
            else:
                sock.close()
        time.sleep(2.0)
        loaded = latencies(svc.url, args.duration)
    return {
        "command": " ".join(["bench/streams_pages.py", *sys.argv[1:]]),
        "streams_attempted": args.streams,
        "answers": {str(k): v for k, v in sorted(statuses.items())},
        "idle": idle,
        "with_streams": loaded,
        "p50_ratio": round(loaded["p50_ms"] / idle["p50_ms"], 2),
        "load_avg": os.getloadavg()[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=400, help="streams attempted")
    ap.add_argument("--clients", type=int, default=40, help="client addresses they come from")
    ap.add_argument("--watched", type=int, default=20, help="queued builds the streams watch")
    ap.add_argument("--builds", type=int, default=200, help="builds seeded before it starts")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of GETs per phase")
    ap.add_argument("--set", action="append", default=[], help="FE_CI_NAME=VALUE for the service")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fe-ci-streams-") as tmp:
        data = Path(tmp) / "data"
        with contextlib.redirect_stdout(sys.stderr):
            seed_database(data, args.builds)
        # the seeded database holds queued builds already: the queue caps are not measured here
        extra = {"FE_CI_MAX_QUEUED_PER_TOKEN": "100000", "FE_CI_MAX_QUEUED_BUILDS": "100000"}
        extra.update(item.split("=", 1) for item in args.set)
        svc = Service(data_dir=data, env=service_env(data, FE_CI_GPU_ARCHS="", **extra)).start()
        try:
            wheel = make_wheel(Path(tmp), "1.32.0", "")
            watched = []
            with httpx.Client(base_url=svc.url, timeout=60) as http:
                for _ in range(args.watched):
                    with wheel.open("rb") as fh:
                        resp = http.post(
                            "/validate",
                            files={"wheel": (wheel.name, fh)},
                            headers={"Authorization": f"Bearer {SUBMIT}"},
                        )
                    assert resp.status_code == 202, resp.text
                    watched.append(int(resp.json()["build_id"]))
            result = run(svc, args, watched)
        finally:
            svc.stop()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
