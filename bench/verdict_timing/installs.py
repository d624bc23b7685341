"""Installing a candidate and probing it: the obvious way (a fresh venv, pip), fe-ci's warm path
(a built dependency layer, with and without its zygote), the floor (the probe alone); uv against
pip; a layer with bytecode against one without."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from core.wire import Stage
from runner.envs import envs, host, layers, warm_install
from runner.isolation import jobbox, zygotes
from runner.pipeline import pipeline, pipeline_options
from testkit.registry import candidate_env


def _probe(python: Path, work: Path) -> float:
    opts = pipeline_options.Options(
        stages=[Stage.probe],
        work_dir=work,
        preinstalled=True,
        candidate_python=python,
        layers_dir=None,
    )
    pipe = pipeline.Pipeline(opts)
    t = time.monotonic()
    res = pipe.probe()
    took = time.monotonic() - t
    assert res.status.value == "pass", res.reason
    return took


def obvious(wheel: Path, work: Path) -> dict[str, float]:
    """A fresh ``python -m venv`` (with pip) and ``pip install`` of the wheel, then the probe."""
    torch = host.host_torch()
    assert torch is not None
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(work / "env")], check=True)
    env = envs.CandidateEnv(work / "env")
    # this host's torch lives in the runner's venv: one line lets the new venv see it
    (env.site_packages() / "host_torch.pth").write_text(f"{torch.site_dir}\n")
    (work / "c.txt").write_text(f"torch=={torch.version}\n")
    t1 = time.monotonic()
    extras = envs.install_extras(envs.read_wheel_metadata(wheel))
    target = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
    done = subprocess.run(
        [str(env.python), "-m", "pip", "install", "-q", "-c", str(work / "c.txt"), target],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    if done.returncode != 0:
        raise SystemExit(f"the obvious way failed: {done.stderr[-2000:]}")
    t2 = time.monotonic()
    probe_s = _probe(env.python, work / "probe")
    return {"venv": t1 - t0, "install": t2 - t1, "probe": probe_s, "total": t2 - t0 + probe_s}


def warm_path(
    wheel: Path, work: Path, layers_dir: Path, pool: zygotes.Zygotes | None = None
) -> dict[str, float]:
    opts = pipeline_options.Options(
        stages=[Stage.probe], work_dir=work, layers_dir=layers_dir, zygotes=pool
    )
    pipe = pipeline.Pipeline(opts)
    t = time.monotonic()
    inst = pipe.install(wheel)
    t1 = time.monotonic()
    assert "reused" in inst.reason, inst.reason
    res = pipe.probe()
    t2 = time.monotonic()
    assert res.status.value == "pass", res.reason
    venv = re.search(r"venv ([\d.]+) s", inst.reason)
    env_s = float(venv.group(1)) if venv else 0.0
    return {
        "venv": env_s,
        "install": t1 - t - env_s,
        "probe": t2 - t1,
        "total": t2 - t,
    }


def side_by_side(wheel: Path, tmp: Path, reps: int) -> dict[str, list[dict]]:
    layers_dir = tmp / "side-layers"
    preinstalled = candidate_env(wheel.name.split("-")[1]).python
    pool = zygotes.Zygotes(tmp / "side-zygotes")
    # the layer exists before the first timed warm run, and the runner's zygote for it is up
    # (a long-running runner starts it with the first build on the layer)
    pipeline.Pipeline(
        pipeline_options.Options(
            stages=[Stage.probe], work_dir=tmp / "prime", layers_dir=layers_dir
        )
    ).install(wheel)
    warm_path(wheel, tmp / "prime-zygote", layers_dir, pool)
    out: dict[str, list[dict]] = {"obvious": [], "warm": [], "warm+zygote": [], "floor": []}
    try:
        for rep in range(reps):
            work = tmp / f"side-{rep}"
            out["obvious"].append(obvious(wheel, work / "obvious"))
            out["warm"].append(warm_path(wheel, work / "warm", layers_dir))
            out["warm+zygote"].append(warm_path(wheel, work / "zygote", layers_dir, pool))
            floor = _probe(preinstalled, work / "floor")
            out["floor"].append({"probe": floor, "total": floor})
            shutil.rmtree(work, ignore_errors=True)
            print(
                "  " + ", ".join(f"{k} {v[-1]['total']:.2f} s" for k, v in out.items()),
                flush=True,
            )
    finally:
        pool.close()
    return out


def installers(wheel: Path, tmp: Path, reps: int) -> dict[str, list[dict]]:
    """uv against pip: building the layer (download caches warm) and the candidate-only install."""
    out: dict[str, list[dict]] = {}
    for rep in range(reps):
        for name in ("uv", "pip"):
            os.environ["FE_CI_INSTALLER"] = name
            layers_dir = tmp / f"inst-{name}-{rep}"
            t = time.monotonic()
            warm_install.ensure_layer(
                envs.read_wheel_metadata(wheel), layers_dir=layers_dir, timeout_s=900
            )
            built = time.monotonic() - t
            env = envs.create_env(tmp / f"inst-env-{name}-{rep}")
            t = time.monotonic()
            with jobbox.temporary(tmp / f"inst-job-{name}-{rep}") as job:
                warm = warm_install.install_warm(
                    env, wheel, job=job, layers_dir=layers_dir, log_path=tmp / "i", timeout_s=900
                )
            assert warm.outcome.ok and warm.installer == name and not warm.problems
            out.setdefault(name, []).append(
                {"layer build": built, "candidate only (+ check)": time.monotonic() - t}
            )
            print(f"  {name}: layer {built:.1f} s", flush=True)
    os.environ.pop("FE_CI_INSTALLER", None)
    return out


def bytecode(wheel: Path, tmp: Path, reps: int) -> dict[str, list[dict]]:
    """The probe through a layer with bytecode (as built now) and the same layer without it."""
    layers_dir = tmp / "bc-layers"
    layer = warm_install.ensure_layer(
        envs.read_wheel_metadata(wheel), layers_dir=layers_dir, timeout_s=900
    )
    assert layer is not None
    bare = layers.Layer(root=tmp / "bc-bare", spec=layer.spec, built_s=None)
    shutil.copytree(layer.root, bare.root, symlinks=True)
    for cache in list(bare.root.rglob("__pycache__")):
        shutil.rmtree(cache)
    pythons = {}
    for name, lay in (("layer with bytecode", layer), ("layer without bytecode", bare)):
        env = envs.create_env(tmp / f"bc-env-{len(pythons)}")
        layers.attach(env.site_packages(), lay)
        cmd = envs.install_command("uv", env, [str(wheel)], no_deps=True)
        subprocess.run(cmd, check=True, capture_output=True)
        pythons[name] = env.python
    out: dict[str, list[dict]] = {name: [] for name in pythons}
    for rep in range(reps):
        for name, python in pythons.items():
            out[name].append({"probe": _probe(python, tmp / f"bc-probe-{rep}")})
    layers.remove(bare.root)
    return out
