"""Time to a probe verdict, against the obvious way and the floor; queue latency; throughput.

    .venv/bin/python bench/time_to_verdict.py [--version 1.32.0] [--cold 3] [--warm 2]
        [--side 3] [--latency 12] [--idle-s 60] [--builds 10000] [--load-s 5] [--json OUT]
        [--only service,side,latency,throughput,installers,bytecode]

Every figure is measured in this one run, on this machine, with the real registry wheel
(testkit/registry.py):

1. through the service: ``POST /validate`` to a real ``fe-ci serve`` on 127.0.0.1, a real
   ``fe-ci runner`` (FE_CI_GPU_ARCHS empty: one CPU job, install + probe) until the build is
   finished, split by stage from the client's clock and the service's database. ``cold`` = a
   runner with an empty cache dir (it builds the dependency layer; the installer's download cache
   is left as it is, so the network is not measured); ``warm`` = the next builds on that runner.
2. side by side, interleaved: (a) the obvious way, a fresh ``python -m venv`` and ``pip install``
   of the wheel with its dependencies, then the probe; (b) fe-ci's warm path (the pipeline's
   install and probe stages with a built layer); (c) the floor, the probe alone in an
   environment that already has the candidate.
3. queue latency: submit -> an idle runner's claim, over many submissions at random moments, and
   how many claim requests an idle runner makes per minute (from the service's access log).
4. throughput: requests/s of ``GET /api/builds/{id}`` and ``GET /`` on one uvicorn worker over
   a database of ``--builds`` builds (bench/dashboard_bench.py's filler), against a minimal
   FastAPI endpoint on the same machine (the ceiling).
5. installers: uv against pip, building a dependency layer and installing the candidate alone.
6. bytecode: the probe through a layer with bytecode against the same layer without it.

The measurements live in bench/verdict_timing/ (1 and 3 in ``service_path``, 2, 5 and 6 in
``installs``, 4 in ``throughput``); this script runs them and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.verdict_timing.installs import bytecode, installers, side_by_side  # noqa: E402
from bench.verdict_timing.service_path import queue_latency, through_service  # noqa: E402
from bench.verdict_timing.throughput import throughput  # noqa: E402
from runner.envs import envs  # noqa: E402
from testkit.registry import registry_wheel  # noqa: E402

RESULTS: dict[str, object] = {}


def spread(values: list[float]) -> str:
    """``median (min-max, n=N)``."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}, n={len(values)})"


def table(rows: dict[str, list[dict]], keys: list[str]) -> None:
    print("| part | " + " | ".join(rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for key in keys:
        cells = [spread([r[key] for r in v]) if v and key in v[0] else "—" for v in rows.values()]
        print(f"| {key} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--version", default="1.32.0")
    parser.add_argument("--cold", type=int, default=3, help="cold runners (each then --warm)")
    parser.add_argument("--warm", type=int, default=2, help="warm builds per cold runner")
    parser.add_argument("--side", type=int, default=3, help="side-by-side repetitions")
    parser.add_argument("--latency", type=int, default=12, help="submissions for queue latency")
    parser.add_argument("--idle-s", type=float, default=60.0)
    parser.add_argument("--builds", type=int, default=10_000)
    parser.add_argument("--load-s", type=float, default=5.0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only", default="service,side,latency,throughput,installers,bytecode")
    args = parser.parse_args()
    only = set(args.only.split(","))
    wheel = registry_wheel(args.version)
    print(f"wheel {wheel.name}; installer {envs.choose_installer()}; {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="fe-ci-ttv-") as tmp_s:
        tmp = Path(tmp_s)
        sections: list[tuple[str, Callable[[], object]]] = [
            ("service", lambda: through_service(wheel, tmp, args.cold, args.warm)),
            ("side", lambda: side_by_side(wheel, tmp, args.side)),
            ("latency", lambda: queue_latency(wheel, tmp, args.latency, args.idle_s)),
            ("throughput", lambda: throughput(tmp, args.builds, args.load_s)),
            ("installers", lambda: installers(wheel, tmp, args.side)),
            ("bytecode", lambda: bytecode(wheel, tmp, args.side)),
        ]
        for name, fn in sections:
            if name in only:
                print(f"\n## {name}", flush=True)
                RESULTS[name] = fn()
    report(args)


def report(args: argparse.Namespace) -> None:
    print("\n# results: median (min-max, n) in seconds\n")
    svc = RESULTS.get("service")
    if isinstance(svc, dict):
        keys = [k for k in svc["cold"][0] if not k.startswith("_")]
        table(svc, keys)
    side = RESULTS.get("side")
    if isinstance(side, dict):
        print()
        table(side, ["venv", "install", "probe", "total"])
        med = {k: statistics.median(r["total"] for r in v) for k, v in side.items()}
        print(f"\nobvious / warm path: {med['obvious'] / med['warm']:.1f}x")
        print(f"warm path / floor: {med['warm'] / med['floor']:.2f}x")
        print(f"obvious / warm path with its zygote: {med['obvious'] / med['warm+zygote']:.1f}x")
        print(f"warm path with its zygote / floor: {med['warm+zygote'] / med['floor']:.2f}x")
        if isinstance(svc, dict):
            key = "probe verdict stored (from POST)"
            warm_total = statistics.median(r[key] for r in svc["warm"])
            ratio = med["obvious"] / warm_total
            print(f"obvious / warm probe verdict through the service: {ratio:.1f}x")
            floor = warm_total / med["floor"]
            print(f"warm probe verdict through the service / floor: {floor:.2f}x")
    inst = RESULTS.get("installers")
    if isinstance(inst, dict):
        print()
        table(inst, ["layer build", "candidate only (+ check)"])
    bc = RESULTS.get("bytecode")
    if isinstance(bc, dict):
        print()
        table(bc, ["probe"])
    lat = RESULTS.get("latency")
    if isinstance(lat, dict):
        values = lat["latency_s"]
        assert isinstance(values, list)
        print(f"\nqueue latency (202 -> claimed), s: {spread(values)}")
        print(f"over 1 s: {sum(v > 1.0 for v in values)} of {len(values)}")
        print(f"idle runner: {lat['idle_claims_per_min']:.1f} claim requests per minute")
    tp = RESULTS.get("throughput")
    if isinstance(tp, dict):
        print("\n| endpoint | requests/s median (min-max) | / ceiling |\n|---|---:|---:|")
        ceiling = statistics.median(next(iter(tp.values())))
        for label, values in tp.items():
            med = statistics.median(values)
            print(
                f"| {label} | {med:.0f} ({min(values):.0f}-{max(values):.0f}) "
                f"| {med / ceiling:.2f} |"
            )
    if args.json:
        args.json.write_text(json.dumps(RESULTS, indent=1))


if __name__ == "__main__":
    main()
