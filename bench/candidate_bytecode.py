"""What the candidate's byte-code (``runner/bytecode.py``) saves each stage: ``fe-ci validate`` of
one wheel, all stages, run in turn with the runner compiling what the probe imported (``with``)
and with that step skipped (``without``, the runner as it was), on one warm compile cache.

    python3 bench/candidate_bytecode.py --wheel W.whl --runs 3 --out bytecode.json

The first run (discarded) warms the dependency layer and the compile cache, so that every run
after it does the same work but for the byte-code. Each run is a fresh ``fe-ci validate``
process; ``without`` replaces ``runner.bytecode.compile_imported`` in that process only. The
figures are each stage's ``duration_s`` from the report, and the validate process's CPU time
(the stages' sandboxed processes included where the sandbox reaps them).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# ``fe-ci validate`` in this interpreter, the byte-code step skipped when argv[1] is "without"
_RUN = """
import sys
from runner import bytecode
if sys.argv.pop(1) == "without":
    bytecode.compile_imported = lambda site, names: bytecode.Compiled()
from runner.cli import main
sys.argv[0] = "fe-ci"
main()
"""


def _validate(mode: str, wheel: Path, cache: Path, work: Path) -> dict[str, Any]:
    report = work / f"{mode}.json"
    env = {**os.environ, "FE_CI_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, mode, "validate", str(wheel), "--json", str(report)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1, 2) or not report.is_file():
        raise SystemExit(f"validate ({mode}) exited {proc.returncode}: {proc.stderr[-3000:]}")
    doc = json.loads(report.read_text())
    stages = {s["name"]: s for job in doc["jobs"] for s in job["stages"]}
    return {
        "mode": mode,
        "verdict": doc["verdict"],
        "wall_s": round(wall, 2),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
        "stages": {name: s.get("duration_s") for name, s in stages.items()},
        "statuses": {name: s["status"] for name, s in stages.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=3, help="runs of each mode, alternating")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fe-ci-bytecode-") as tmp:
        cache, work = Path(tmp) / "cache", Path(tmp) / "work"
        work.mkdir()
        warm = _validate("with", args.wheel, cache, work)
        print(f"warm-up: {warm['wall_s']} s, verdict {warm['verdict']}", file=sys.stderr)
        runs = []
        for i in range(args.runs):
            for mode in ("with", "without") if i % 2 == 0 else ("without", "with"):
                runs.append(_validate(mode, args.wheel, cache, work))
                print(json.dumps(runs[-1]), file=sys.stderr)
    summary: dict[str, Any] = {}
    for mode in ("with", "without"):
        mine = [r for r in runs if r["mode"] == mode]
        names = sorted({n for r in mine for n in r["stages"]})
        summary[mode] = {
            "wall_s": statistics.median(r["wall_s"] for r in mine),
            "cpu_s": statistics.median(r["cpu_s"] for r in mine),
            "stages_s": {
                n: statistics.median(r["stages"].get(n) or 0.0 for r in mine) for n in names
            },
        }
    out = {"wheel": args.wheel.name, "runs": runs, "median": summary, "warm_up": warm}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
