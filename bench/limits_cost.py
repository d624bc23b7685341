"""What the sandbox's limits cost (``runner/isolation/limits.py``): a sandbox start and a probe,
with the limits (a cgroup of the stage's own, sized tmpfs, the job directory's watcher, the
sandbox's init as reporter) and without them (every limit set to 0), interleaved.

    .venv/bin/python bench/limits_cost.py [--starts 20] [--probes 5] [--json OUT]

1. start: ``python -I -S -c pass`` in the host's strongest sandbox, as the job's uid, wall time
   from ``sandbox.run`` to its end.
2. probe: the probe of the registry's 1.32.0 on its dependency layer (installed once), a fresh
   interpreter, and a fork of the layer's warm worker (one worker started with the limits, one
   without; their starts are not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.sandbox_cost import summary, timed_probe  # noqa: E402
from runner.isolation import jail, limits, sandbox, uids, zygotes  # noqa: E402
from testkit.registry import registry_wheel  # noqa: E402

OFF = {k: "0" for k in ("FE_CI_SANDBOX_PIDS", "FE_CI_SANDBOX_MEMORY_MB",
                        "FE_CI_SANDBOX_TMP_MB", "FE_CI_JOB_DIR_MB")}  # fmt: skip


@contextmanager
def mode(on: bool) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in OFF}
    if not on:
        os.environ.update(OFF)
    limits.wanted.cache_clear()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        limits.wanted.cache_clear()


def starts(tmp: Path, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"without limits": [], "with limits": []}
    cmd = [sys.executable, "-I", "-S", "-c", "pass"]
    with uids.UidRange.default().lease() as uid:
        own = tmp / "start" / "box"
        uids.hand_over(own, uid)
        jail.make_reachable(own)
        box = jail.Box(uid=uid, rw=(own,), ro=jail.runner_paths(), cwd=own)
        for _ in range(n):
            for on in (False, True):
                with mode(on):
                    t = time.monotonic()
                    done = sandbox.run(
                        cmd, timeout_s=60, log_path=tmp / "s.log", env={"PATH": os.defpath}, box=box
                    )
                    out["with limits" if on else "without limits"].append(time.monotonic() - t)
                    assert done.ok, done
    return out


def probes(tmp: Path, n: int) -> dict[str, list[float]]:
    wheel = registry_wheel("1.32.0")
    layers_dir = tmp / "layers"
    pools = {on: zygotes.Zygotes(tmp / f"zygotes-{on}") for on in (False, True)}
    out: dict[str, list[float]] = {}

    def probe(work: Path, zs: zygotes.Zygotes | None) -> float:
        return timed_probe(wheel, work, layers_dir, zs)

    try:
        for on, pool in pools.items():
            with mode(on):
                probe(tmp / f"prime-{on}", pool)  # the layer built, the worker started
        for i in range(n):
            for on in (False, True):
                word = "with limits" if on else "without limits"
                with mode(on):
                    fresh = probe(tmp / f"fresh-{on}-{i}", None)
                    warm = probe(tmp / f"warm-{on}-{i}", pools[on])
                out.setdefault(f"fresh interpreter, {word}", []).append(fresh)
                out.setdefault(f"warm-worker fork, {word}", []).append(warm)
    finally:
        for pool in pools.values():
            pool.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fe-ci-limits-cost-") as tmp:
        results = {"start": starts(Path(tmp), args.starts), "probe": probes(Path(tmp), args.probes)}
    for part in ("start", "probe"):
        print(f"\n| {part} | median (min-max, n) |\n|---|---|")
        for name, values in results[part].items():
            print(f"| {name} | {summary(values)} |")
    print(f"\nsandbox: {jail.isolation()}")
    if args.json:
        doc = {**results, "sandbox": jail.isolation()}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
