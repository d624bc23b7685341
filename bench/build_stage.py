"""The build stage's own cost by installer: the same commit built through uv and through pip.

    .venv/bin/python bench/build_stage.py [--rounds 5]

Makes the frontend-shaped git repository of ``testkit/frontend_repo.py`` in a temp dir, then runs
``runner.build.run_build`` on one of its commits ``--rounds`` times per installer (alternating,
each round in a fresh work dir, the mirror kept as a runner keeps it), and prints the median and
the spread of the stage's wall time and of the CPU time of its child processes. The package is pure
Python: what is measured is what the stage adds around a repository's own compile (a fresh build
environment, its build requirements, starting the backend), which every commit build pays.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core import commits
from runner import build
from runner.envs import envs
from testkit import frontend_repo as fr


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_build(repo: Path, sha: str, cache: Path, work: Path, installer: str) -> tuple[float, float]:
    cpu, start = children_cpu_s(), time.monotonic()
    mirror = commits.ensure_commit(str(repo), sha, cache, work / "mirror.log")
    src = commits.export_tree(mirror, sha, work / "src")
    build.build_wheel(
        src, work / "dist", work=work, log=work / "build.log", timeout_s=600, installer=installer
    )
    return time.monotonic() - start, children_cpu_s() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    installers = ["uv", "pip"] if envs.find_uv() else ["pip"]
    with tempfile.TemporaryDirectory(prefix="fe-ci-build-bench-") as tmp:
        root = Path(tmp)
        repo = root / "repo"
        repo.mkdir()
        fr.git(repo, "init", "-q", "-b", "develop")
        sha = fr.commit(repo, 1, knob=True)
        one_build(repo, sha, root / "cache", root / "warmup", installers[0])  # the mirror
        got: dict[str, list[tuple[float, float]]] = {i: [] for i in installers}
        for n in range(args.rounds):
            for installer in installers:
                work = root / f"{installer}-{n}"
                got[installer].append(one_build(repo, sha, root / "cache", work, installer))
    print(f"build stage, {args.rounds} rounds per installer (median, min-max)")
    for installer, rows in got.items():
        walls, cpus = [r[0] for r in rows], [r[1] for r in rows]
        print(
            f"  {installer:4s} wall {statistics.median(walls):5.2f} s ({min(walls):.2f}-"
            f"{max(walls):.2f})   child CPU {statistics.median(cpus):5.2f} s "
            f"({min(cpus):.2f}-{max(cpus):.2f})"
        )


if __name__ == "__main__":
    main()
