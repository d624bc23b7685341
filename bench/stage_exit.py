"""What a stage's process costs after its document is written: the interpreter's exit.

    .venv/bin/python bench/stage_exit.py [--version 1.32.0 | --python PY] [--rounds 5]
        [--root CHECKOUT] [--json OUT]

Each round is a fresh interpreter of the candidate's environment (the registry's release, as the
test suite builds it, or ``--python``) running the probe stage (``python -m runner.inside.probe``,
the GPU hidden) from ``--root``'s ``runner/`` (default this checkout; an older checkout gives the
figure before): ``wall_s`` from start to the process's end, ``after_doc_s`` from the document's
write (its mtime) to the end. Prints the medians and writes the rounds with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import candidate_args  # noqa: E402


def one_round(python: Path, root: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        params, doc = Path(tmp) / "in.json", Path(tmp) / "out.json"
        params.write_text(json.dumps({"expect_torch": True, "surface": False}))
        env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")
        env["CUDA_VISIBLE_DEVICES"] = ""
        argv = [str(python), "-m", "runner.inside.probe", "--in", str(params), "--out", str(doc)]
        t0 = time.time()
        done = subprocess.run(argv, env=env, cwd=root, capture_output=True, text=True, timeout=600)
        end = time.time()
        if done.returncode != 0 or not doc.is_file():
            raise SystemExit(f"the probe stage failed:\n{done.stderr[-3000:]}")
        written = doc.stat().st_mtime
        return {"wall_s": round(end - t0, 3), "after_doc_s": round(end - written, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    candidate_args.add(ap)
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose runner/ runs")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    python = candidate_args.python(args)
    rounds = [one_round(python, args.root.resolve()) for _ in range(args.rounds)]
    for key in ("wall_s", "after_doc_s"):
        values = [r[key] for r in rounds]
        spread = f"{min(values):.3f}-{max(values):.3f}"
        print(f"{key:12s} {statistics.median(values):6.3f} s  ({spread}, n={len(values)})")
    if args.json is not None:
        doc = {"python": str(python), "root": str(args.root), "rounds": rounds}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
