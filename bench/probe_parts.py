"""Where the probe's seconds go, inside the candidate's interpreter: torch, each subject's entry
points, the feature ledger, the surface read from the source, the environment block.

    .venv/bin/python bench/probe_parts.py [--version 1.32.0 | --python PY] [--rounds 3]
        [--preload MODULES] [--json OUT]

Each round is a fresh interpreter of the candidate's environment (the registry's release, as the
test suite builds it, or ``--python``: an interpreter that has the frontend, e.g. on a GPU host)
running ``runner.inside.probe``'s parts one after another, as ``probe()`` does, with the GPU hidden
on a host that has one unless ``--gpu``. The probe stage adds the process, the sandbox and the
documents around these parts. ``--preload`` (comma-separated; default the runner's warm zygote's,
``runner.isolation.zygotes.PRELOAD``; ``''`` for a fresh interpreter) is imported first, untimed,
as a stage forked from the zygote finds it. Prints the median of each part and writes the rounds
with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import candidate_args  # noqa: E402
from runner.isolation.zygotes import PRELOAD  # noqa: E402

PARTS = r"""
import importlib, json, sys, time
for name in filter(None, sys.argv[1].split(",")):
    importlib.import_module(name)
t = time.perf_counter
out = {}
a = t(); import torch; out["torch"] = t() - a
from runner.inside import discovery, probe
from core.subjects import SUBJECTS
a = t(); cudnn = probe.resolve("cudnn"); out["cudnn"] = t() - a
for s in SUBJECTS.values():
    a = t(); probe.probe_subject(s); out["subject " + s.name] = t() - a
a = t()
for f in probe.FEATURES:
    probe.detect_feature(f)
out["features"] = t() - a
a = t(); discovery.probe_surface(cudnn); out["surface"] = t() - a
a = t(); probe.environment(cudnn); out["environment"] = t() - a
print(json.dumps(out))
"""


def one_round(python: Path, gpu: bool, preload: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run(
        [str(python), "-c", PARTS, preload],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"the probe's parts failed:\n{done.stderr[-4000:]}")
    parts: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    candidate_args.add(ap)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gpu", action="store_true", help="leave the GPU visible")
    ap.add_argument("--preload", default=",".join(PRELOAD), help="imported first, untimed")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    python = candidate_args.python(args)
    rounds = [one_round(python, args.gpu, args.preload) for _ in range(args.rounds)]
    for name in rounds[0]:
        values = [r[name] for r in rounds]
        spread = f"{min(values):.3f}-{max(values):.3f}"
        print(f"{name:36s} {statistics.median(values):7.3f} s  ({spread})")
    total = [sum(r.values()) for r in rounds]
    print(f"{'all parts':36s} {statistics.median(total):7.3f} s  (n={len(rounds)})")
    if args.json is not None:
        doc = {"python": str(python), "preload": args.preload, "rounds": rounds}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
