"""What keying the compile cache costs the runner before each determinism stage.

    .venv/bin/python bench/compile_keys.py [--version 1.32.0] [--rounds 5]

``runner.cache.compile_keys.compute_keys`` on the registry's release as the test suite installs it
(its environment's site-packages and the host's torch), ``--rounds`` times in this interpreter:
prints each round's seconds, their median, and the two keys (the same in every round). Run it
from a checkout to measure that checkout (a ``git worktree`` of an earlier commit for "before").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.cache import compile_keys  # noqa: E402
from runner.envs import host  # noqa: E402
from testkit.registry import candidate_env  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default="1.32.0")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    dirs = [candidate_env(args.version).site_packages()]
    if (torch := host.host_torch()) is not None:
        dirs.append(torch.site_dir)
    took, keys = [], set()
    for _ in range(args.rounds):
        start = time.perf_counter()
        found = compile_keys.compute_keys(dirs, family="sm_90", gpu="NVIDIA H200")
        took.append(time.perf_counter() - start)
        if found is None:
            raise SystemExit(f"no key: no {compile_keys.CANDIDATE_DIST} in {dirs}")
        keys.add((found[0].digest(), found[1].digest()))
    print("rounds:", " ".join(f"{t:.3f}" for t in took))
    spread = f"{min(took):.3f}-{max(took):.3f}"
    print(f"median {statistics.median(took):.3f} s ({spread}), n={len(took)}")
    for whole, source in sorted(keys):
        print(f"keys: {whole} {source}")


if __name__ == "__main__":
    main()
