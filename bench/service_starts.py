"""What a service start costs: ``fe-ci serve`` on a new SQLite file, up to its first ``/healthz``
answer, then stopped (SIGTERM), as the tests and an operator's restarts do.

    .venv/bin/python bench/service_starts.py [--starts 10]           # fresh interpreters
    .venv/bin/python bench/service_starts.py [--starts 10] --forked  # as the tests start them

Prints the CPU (user + system) that each service process had used when its ``/healthz`` first
answered (read from ``/proc/PID/stat``), the CPU of the whole processes up to their exit where
this process is their parent (fresh starts), and the median wall time to ``/healthz``. With
``--forked`` the services are children of the fork server of ``testkit/forkserver.py`` (which
imported their modules once, before the first start; its own CPU is printed apart).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit import processes  # noqa: E402
from testkit.service import Service, service_env  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a live process, from ``/proc/PID/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=10)
    ap.add_argument("--forked", action="store_true", help="fork them from a warm parent")
    args = ap.parse_args()
    if args.forked:
        os.environ[processes.ENABLED] = "1"
    else:
        os.environ.pop(processes.ENABLED, None)
    walls, at_health = [], []
    with tempfile.TemporaryDirectory(prefix="fe-ci-starts-") as tmp:
        before = children_cpu()
        for i in range(args.starts):
            data = Path(tmp, f"s{i}", "data")
            data.parent.mkdir()
            svc = Service(data_dir=data, env=service_env(data))
            began = time.perf_counter()
            svc.start()
            walls.append(time.perf_counter() - began)
            assert svc.proc is not None
            forked = isinstance(svc.proc, processes.Forked)
            if forked != args.forked:
                raise SystemExit(f"start {i}: forked={forked}, asked forked={args.forked}")
            at_health.append(process_cpu(svc.proc.pid))
            svc.stop()
        server = processes._server
        server_cpu = process_cpu(server.proc.pid) if server is not None else 0.0
        processes.close()
        whole = children_cpu() - before
    kind = "forked" if args.forked else "fresh"
    print(
        f"{args.starts} {kind} starts: {sum(at_health) / args.starts:.3f} s of CPU a start up to "
        f"/healthz (median {statistics.median(at_health):.3f}), "
        f"median {statistics.median(walls):.2f} s to /healthz"
    )
    if args.forked:
        print(f"the fork server: {server_cpu:.2f} s of CPU (its imports, once)")
    else:
        print(f"whole processes, to their exit: {whole / args.starts:.3f} s of CPU a start")


if __name__ == "__main__":
    main()
