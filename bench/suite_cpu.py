"""Where the test suite's time goes, by module: the rows ``testkit/cpu_accounting.py`` wrote.

    FE_CI_CPU_ACCOUNTING_DIR=/tmp/suite-cpu ./scripts/test -p testkit.cpu_accounting
    .venv/bin/python bench/suite_cpu.py /tmp/suite-cpu [--top 25]

Prints each module's test count, the sum of its tests' wall time and its CPU time (the test
process's own and that of the processes it started), the slowest tests by CPU, and the totals.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    rows = [r for f in sorted(args.dir.glob("rows-*.json")) for r in json.loads(f.read_text())]
    if not rows:
        raise SystemExit(f"{args.dir}: no rows-*.json (run the suite with the plugin first)")
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for r in rows:
        m = modules[r["test"].split("::")[0]]
        m[0] += 1
        m[1] += r["wall_s"]
        m[2] += r["cpu_self_s"]
        m[3] += r["cpu_children_s"]
    total = [sum(m[i] for m in modules.values()) for i in range(4)]
    cpu_min = (total[2] + total[3]) / 60
    print(
        f"{len(rows)} tests: wall {total[1]:.0f} s summed over workers, CPU {total[2]:.0f} s in "
        f"the test processes + {total[3]:.0f} s in their children = {cpu_min:.1f} min"
    )
    print(f"\n{'module':44s} {'tests':>5s} {'wall s':>7s} {'CPU s':>6s} {'share':>6s}")
    by_cpu = sorted(modules.items(), key=lambda kv: -(kv[1][2] + kv[1][3]))
    for name, (n, wall, own, kids) in by_cpu[: args.top]:
        share = (own + kids) / (total[2] + total[3])
        print(f"{name:44s} {n:5.0f} {wall:7.0f} {own + kids:6.0f} {share:6.1%}")
    print(f"\nslowest {args.top} tests by CPU")
    for r in sorted(rows, key=lambda r: -(r["cpu_self_s"] + r["cpu_children_s"]))[: args.top]:
        cpu = r["cpu_self_s"] + r["cpu_children_s"]
        print(f"  {cpu:6.1f} s CPU {r['wall_s']:6.1f} s wall  {r['test']}")


if __name__ == "__main__":
    main()
