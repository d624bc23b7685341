"""What a service start costs: ``fe-ci serve`` on a new SQLite file, up to its first ``/healthz``
answer, then stopped (SIGTERM), as the tests and an operator's restarts do.

    .venv/bin/python bench/service_starts.py [--starts 10]

Prints the CPU (user + system) of the service processes, waited for one after the other, per
start and in all, and the median wall time to ``/healthz``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.service import Service, service_env  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=10)
    args = ap.parse_args()
    walls = []
    with tempfile.TemporaryDirectory(prefix="fe-ci-starts-") as tmp:
        before = children_cpu()
        for i in range(args.starts):
            data = Path(tmp, f"s{i}", "data")
            data.parent.mkdir()
            svc = Service(data_dir=data, env=service_env(data))
            began = time.perf_counter()
            svc.start()
            walls.append(time.perf_counter() - began)
            svc.stop()
        cpu = children_cpu() - before
    print(
        f"{args.starts} starts: {cpu:.2f} s of CPU in all, {cpu / args.starts:.3f} s a start; "
        f"median {statistics.median(walls):.2f} s to /healthz"
    )


if __name__ == "__main__":
    main()
