"""The service's memory under unauthenticated bodies sent to a token route, against its idle memory.

    .venv/bin/python bench/unauth_bodies.py [--bodies 4] [--mb 10] [--path /api/pins/sm_90/x]

Starts a real ``fe-ci serve`` on 127.0.0.1 over a fresh data dir, samples its RSS from /proc every
20 ms while idle for 2 s, then sends ``--bodies`` POSTs at once, each a ``--mb`` MB JSON body
(a re-pin whose reason is that long) with a wrong token, over raw sockets (a client that keeps
sending while the service answers), and prints a JSON summary: idle RSS, peak RSS, each answer's
status and code, how much of each body the service took before it answered, and the seconds.
Removes everything it wrote unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit.service import Service, service_env


def sample(svc: Service, samples: list[int], done: threading.Event) -> None:
    while not done.is_set():
        samples.append(svc.rss_bytes())
        time.sleep(0.02)


def send(svc: Service, path: str, size: int) -> dict[str, Any]:
    body = b'{"config": null, "reason": "' + b"A" * (size - 32) + b'"}'
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer not-the-admin-token\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    t0 = time.monotonic()
    sent = 0
    data = b""
    with socket.create_connection(("127.0.0.1", svc.port), timeout=120) as sock:
        sock.sendall(head)
        try:
            for i in range(0, len(body), 65536):
                sock.sendall(body[i : i + 65536])
                sent += len(body[i : i + 65536])
        except OSError:
            pass  # the service answered and closed while the body was still coming
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except OSError:
            pass
    status_line, _, rest = data.partition(b"\r\n")
    payload = rest.partition(b"\r\n\r\n")[2]
    try:
        code = json.loads(payload)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = None
    status = int(status_line.split()[1]) if status_line.startswith(b"HTTP/") else None
    return {
        "status": status,
        "code": code,
        "body_bytes": len(body),
        "sent_before_close": sent,
        "seconds": round(time.monotonic() - t0, 2),
    }


def run(svc: Service, bodies: int, size: int, path: str) -> dict[str, Any]:
    samples: list[int] = []
    done = threading.Event()
    sampler = threading.Thread(target=sample, args=(svc, samples, done), daemon=True)
    sampler.start()
    try:
        time.sleep(2.0)
        idle = max(samples) / 2**20
        samples.clear()
        answers: list[dict[str, Any]] = []
        threads = [
            threading.Thread(target=lambda: answers.append(send(svc, path, size)))
            for _ in range(bodies)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(0.5)
        peak = max(samples) / 2**20
    finally:
        done.set()
        sampler.join()
    return {
        "path": path,
        "bodies": bodies,
        "body_mb": size / 2**20,
        "idle_rss_mb": round(idle, 1),
        "peak_rss_mb": round(peak, 1),
        "over_idle_mb": round(peak - idle, 1),
        "answers": answers,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bodies", type=int, default=4, help="bodies sent at once")
    ap.add_argument("--mb", type=float, default=10.0, help="each body's size in MB")
    ap.add_argument("--path", default="/api/pins/sm_90/x", help="the token route posted to")
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the data dir")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fe-ci-unauth-", dir=args.dir))
    svc = Service(data_dir=root / "data", env=service_env(root / "data")).start()
    try:
        result = run(svc, args.bodies, int(args.mb * 2**20), args.path)
    finally:
        svc.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
