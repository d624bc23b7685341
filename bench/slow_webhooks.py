"""Slow webhook deliveries: the service's memory and health while many stall mid-body.

    .venv/bin/python bench/slow_webhooks.py [--connections 300] [--body-kb 1000] [--hold 20]
        [--variants short,well-formed] [--json FILE]

For each variant a fresh ``fe-ci serve`` on 127.0.0.1 (over an empty data dir) gets
``--connections`` webhook deliveries, opened one after another, each declaring one byte more than
it sends: its head (with the variant's ``X-Hub-Signature-256``), then ``--body-kb`` KiB of a JSON
body, then nothing. ``short`` signs with ``sha256=00`` (the ``sha256=`` shape, not a digest);
``well-formed`` with ``sha256=`` and 64 zeros (the right shape, the wrong digest: only the body
can show it). They are held ``--hold`` seconds while the service's RSS is sampled from /proc every
0.1 s and ``/healthz`` is asked every 0.25 s; then what each connection was answered (status
line, or nothing yet) is counted and all are closed. Prints, and writes with ``--json``, per
variant: RSS before, peak and after in MB, the health checks' statuses and latency, the answers.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.load import quantiles
from testkit import loopback
from testkit.service import Service, service_env

SIGNATURES = {"short": "sha256=00", "well-formed": "sha256=" + "0" * 64}


def head(signature: str, length: int) -> bytes:
    return (
        "POST /api/webhooks/github HTTP/1.1\r\nHost: bench\r\nX-GitHub-Event: push\r\n"
        "X-GitHub-Delivery: slow\r\nContent-Type: application/json\r\n"
        f"X-Hub-Signature-256: {signature}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def open_slow(port: int, signature: str, body: bytes) -> socket.socket:
    """A delivery that sends all of ``body`` but its last byte, then stalls."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(head(signature, len(body) + 1) + body)
    except OSError:
        pass  # answered and closed from the headers: the status line is read later
    return sock


def answer_of(sock: socket.socket) -> str:
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return "none yet"
        first = sock.recv(64)
    except OSError as exc:
        return type(exc).__name__
    return first.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"


def run_variant(signature: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    data = root / "data"
    svc = Service(data_dir=data, env=service_env(data)).start()
    rss: list[float] = []
    health: Counter[str] = Counter()
    health_s: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            rss.append(svc.rss_bytes() / (1 << 20))

    def check_health() -> None:
        while not stop.wait(0.25):
            start = time.perf_counter()
            try:
                health[str(loopback.get(f"{svc.url}/healthz", timeout=10).status_code)] += 1
                health_s.append(time.perf_counter() - start)
            except httpx.HTTPError as exc:
                health[type(exc).__name__] += 1

    body = b'{"ref": "' + b"x" * (args.body_kb * 1024 - 9)
    try:
        before = svc.rss_bytes() / (1 << 20)
        threads = [threading.Thread(target=sample), threading.Thread(target=check_health)]
        for t in threads:
            t.start()
        t0 = time.monotonic()
        socks = [open_slow(svc.port, signature, body) for _ in range(args.connections)]
        opened_s = time.monotonic() - t0
        time.sleep(max(0.0, args.hold - opened_s))
        answers = Counter(answer_of(s) for s in socks)
        for s in socks:
            s.close()
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join()
        after = svc.rss_bytes() / (1 << 20)
    finally:
        stop.set()
        svc.stop()
    return {
        "signature": signature,
        "opened_s": round(opened_s, 2),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "rss_mb": {
            "before": round(before, 1),
            "peak": round(max(rss), 1),
            "after": round(after, 1),
        },
        "healthz": dict(health),
        "healthz_ms": quantiles(health_s, 1000.0),
        "answers": dict(answers),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--connections", type=int, default=300)
    ap.add_argument("--body-kb", type=int, default=1000, help="body sent before stalling")
    ap.add_argument("--hold", type=float, default=20.0, help="seconds from the first open")
    ap.add_argument("--variants", default="short,well-formed")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    result: dict[str, Any] = {
        "command": " ".join(["bench/slow_webhooks.py", *sys.argv[1:]]),
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
    }
    for name in args.variants.split(","):
        with tempfile.TemporaryDirectory(prefix="fe-ci-slow-webhooks-") as tmp:
            result[name] = run_variant(SIGNATURES[name], args, Path(tmp))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
