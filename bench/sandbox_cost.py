"""What the candidate's sandbox costs: starting a process in it, and a probe through a warm zygote
whose every stage gets namespaces of its own, against a fresh interpreter.

    .venv/bin/python bench/sandbox_cost.py [--starts 20] [--probes 5] [--json OUT]

1. start: ``python -I -S -c pass`` started plainly, and in each sandbox this host allows (``pgroup``
   as the job's uid, ``unshare`` + ``runner/isolation/nsinit.py``, ``bwrap``), interleaved, wall
   time from ``sandbox.run`` to its end.
2. probe: the probe of the registry's 1.32.0 on its dependency layer (installed once), in the
   host's strongest sandbox: a fresh interpreter, and a fork of the layer's zygote (its room: the
   candidate hard-linked in; its user, pid, mount, network, ipc and uts namespaces; its init),
   interleaved; the zygote's own start is not counted (a runner keeps it). And a zygote fork of
   an empty stage: what the room, the namespaces and the init cost before a stage's own work.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.wire import Stage, Status  # noqa: E402
from runner.envs import envs, warm_install  # noqa: E402
from runner.isolation import jail, sandbox, uids, zygotes  # noqa: E402
from runner.pipeline import pipeline, pipeline_options  # noqa: E402
from testkit.registry import registry_wheel  # noqa: E402


def _mechanisms() -> dict[str, jail.Mechanism]:
    found = {}
    for name in ("pgroup", "unshare", "bwrap"):
        os.environ["FE_CI_SANDBOX"] = name
        jail.mechanism.cache_clear()
        m = jail.mechanism()
        if m.name == name:
            found[name] = m
    os.environ.pop("FE_CI_SANDBOX")
    jail.mechanism.cache_clear()
    return found


def starts(tmp: Path, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"plain": []}
    cmd = [sys.executable, "-I", "-S", "-c", "pass"]
    env = {"PATH": os.defpath}
    mechanisms = _mechanisms()
    with uids.UidRange.default().lease() as uid:
        own = tmp / "start" / "box"
        uids.hand_over(own, uid)
        box = jail.Box(uid=uid, rw=(own,), ro=jail.runner_paths(), cwd=own)
        for _ in range(n):
            t = time.monotonic()
            assert sandbox.run(cmd, timeout_s=60, log_path=tmp / "plain.log", env=env).ok
            out["plain"].append(time.monotonic() - t)
            for name, m in mechanisms.items():
                jail.mechanism.cache_clear()
                os.environ["FE_CI_SANDBOX"] = name
                jail.mechanism()  # found again: not part of the start
                t = time.monotonic()
                log = tmp / f"{name}.log"
                done = sandbox.run(cmd, timeout_s=60, log_path=log, env=env, box=box)
                assert done.ok, done.log_tail
                out.setdefault(m.describe(), []).append(time.monotonic() - t)
    os.environ.pop("FE_CI_SANDBOX", None)
    jail.mechanism.cache_clear()
    return out


def timed_probe(wheel: Path, work: Path, layers_dir: Path, zs: zygotes.Zygotes | None) -> float:
    """Seconds of one probe stage of ``wheel``, installed first (not timed) in ``work``."""
    opts = pipeline_options.Options(
        stages=[Stage.probe], work_dir=work, layers_dir=layers_dir, zygotes=zs
    )
    pipe = pipeline.Pipeline(opts)
    assert pipe.install(wheel).status == Status.pass_
    t = time.monotonic()
    res = pipe.probe()
    took = time.monotonic() - t
    pipe.close()
    assert res.status == Status.pass_, res.reason
    return took


def probes(tmp: Path, n: int) -> dict[str, list[float]]:
    wheel = registry_wheel("1.32.0")
    layers_dir = tmp / "layers"
    pool = zygotes.Zygotes(tmp / "zygotes")
    out: dict[str, list[float]] = {"fresh interpreter": [], "zygote fork": []}

    def probe(work: Path, zs: zygotes.Zygotes | None) -> float:
        return timed_probe(wheel, work, layers_dir, zs)

    try:
        probe(tmp / "prime", pool)  # the layer built, the zygote started
        for i in range(n):
            out["fresh interpreter"].append(probe(tmp / f"fresh-{i}", None))
            out["zygote fork"].append(probe(tmp / f"zygote-{i}", pool))
        out["zygote fork of an empty stage"] = empty_stages(tmp, pool, layers_dir, 4 * n)
    finally:
        pool.close()
    return out


def empty_stages(tmp: Path, pool: zygotes.Zygotes, layers_dir: Path, n: int) -> list[float]:
    """What a warm stage costs before its own work: room, namespaces, init, document copied out."""
    meta = envs.read_wheel_metadata(registry_wheel("1.32.0"))
    layer = warm_install.ensure_layer(meta, layers_dir=layers_dir, timeout_s=900)
    assert layer is not None
    z = pool.get(layer)
    assert z is not None
    site = tmp / "empty-site"
    site.mkdir()
    (site / "fe_ci_empty.py").write_text("")
    (tmp / "empty.json").write_text("{}")
    took = []
    for i in range(n):
        t = time.monotonic()
        done = z.run(
            module="fe_ci_empty",
            params=tmp / "empty.json",
            env={"PATH": os.defpath},
            site=site,
            log_path=tmp / "empty.log",
            out_path=tmp / f"empty-{i}.json",
            timeout_s=60,
        )
        took.append(time.monotonic() - t)
        assert done is not None and done.ok, done
    return took


def summary(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"{statistics.median(ms):.0f} ms ({min(ms):.0f}-{max(ms):.0f}, n={len(ms)})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fe-ci-sandbox-cost-") as tmp:
        results = {"start": starts(Path(tmp), args.starts), "probe": probes(Path(tmp), args.probes)}
    results["sandbox"] = {"strongest": jail.mechanism().describe()}  # type: ignore[dict-item]
    for part in ("start", "probe"):
        print(f"\n| {part} | median (min-max, n) |\n|---|---|")
        for name, values in results[part].items():
            print(f"| {name} | {summary(values)} |")
    print(f"\nsandbox of the probes: {jail.mechanism().describe()}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
