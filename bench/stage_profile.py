"""Where a warm determinism stage's seconds go on a GPU host, and what could take them back.

    python3 bench/stage_profile.py --state DIR --out DIR [--rounds 2] [--parts stage,profile,...]

Needs a CUDA GPU and an interpreter that has the frontend (``PYTHONPATH`` may point at it). The
parts, each in fresh interpreters, in this order:

- ``stage``: ``python -m runner.inside.determinism`` on one compile cache (``--state``), once to
  fill it, then ``--rounds`` warm: each run's wall from launch to exit, ``timings["stage"]`` and
  every subject's phases. Every subject starts at, and compares at, the config pinned for it
  (``--pins``; default: the H200 stream's pins), as a warm build of the service does. Each run
  has a HOME and a TMPDIR of its own, as a sandboxed stage has. The CUDA driver's cache of the
  kernels it compiles from PTX is ``--state``/cuda: emptied before each ``fresh`` run, kept
  across the ``kept`` runs (what that cache is worth to this user: the driver reused only entries
  the same uid wrote, docs/measurements/gpu-stage-2026-12-05d.md).
- ``profile``: one more warm run under cProfile: the functions by cumulative and by own time.
- ``imports``: the seconds of each import the stage makes before its first subject.
- ``fork``: a parent with the GPU hidden imports the warm zygote's ``PRELOAD`` and forks; the
  child makes the GPU visible, initialises CUDA and a cuDNN handle: whether a GPU stage can be a
  fork of a warm parent, and what it would skip.
- ``graphs``: ``sdpa_bwd``'s graphs at its pin: the workload built (three graphs), one backward
  graph built again in the same process, two built one after the other and two in two threads
  (a handle each), and a graph serialised and deserialised where the frontend can.

Writes ``stage_profile.json`` and ``profile.txt`` under ``--out``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.isolation.zygotes import PRELOAD  # noqa: E402

PINS = {
    "sdpa_bwd": "b4_h16_s4096_d128_causal",
    "sdpa_torch_bwd": "b4_h16_s4096_d128_causal",
    "flex_attention_bwd": "b2_s2048_h16_d128_causal",
    "indexer_top_k": "rows64_cols8192_topk512_l8",
}
STAGE = "runner.inside.determinism"

IMPORTS = r"""
import importlib, json, sys, time
out = {}
for name in sys.argv[1].split(","):
    a = time.perf_counter(); importlib.import_module(name); out[name] = time.perf_counter() - a
from core.subjects import SUBJECTS
for name in sys.argv[2].split(","):
    a = time.perf_counter(); SUBJECTS[name].load(); out["subject " + name] = time.perf_counter() - a
a = time.perf_counter(); import torch; torch.zeros(1, device="cuda")
out["cuda"] = time.perf_counter() - a
print(json.dumps(out))
"""

FORK = r"""
import importlib, json, os, sys, time
visible = os.environ.pop("CUDA_VISIBLE_DEVICES", None)
os.environ["CUDA_VISIBLE_DEVICES"] = ""
a = time.perf_counter()
for name in sys.argv[1].split(","):
    importlib.import_module(name)
out = {"preload_s": time.perf_counter() - a}
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read)
    child = {}
    try:
        if visible is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        import torch
        a = time.perf_counter()
        child["available"] = torch.cuda.is_available()
        child["device_count"] = torch.cuda.device_count()
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        child["cuda_init_s"] = time.perf_counter() - a
        a = time.perf_counter()
        import cudnn
        handle = cudnn.create_handle()
        child["cudnn_s"] = time.perf_counter() - a
        x = torch.randn(256, 256, device="cuda")
        child["matmul_ok"] = bool(torch.isfinite(x @ x).all())
    except BaseException as exc:
        child["error"] = f"{type(exc).__name__}: {exc}"
    os.write(write, json.dumps(child).encode())
    os._exit(0)
os.close(write)
data = os.read(read, 1 << 16)
os.waitpid(pid, 0)
out["child"] = json.loads(data or b"{}")
print(json.dumps(out))
"""

GRAPHS = r"""
import copy, json, sys, threading, time
import torch, cudnn
from runner.inside.subjects import sdpa_bwd
t = time.perf_counter
config = next(c for c in sdpa_bwd.CONFIGS if c.name == sys.argv[1])
device = torch.device("cuda")
torch.zeros(1, device=device)
out = {}
a = t(); w = sdpa_bwd.SdpaWorkload(config, device); torch.cuda.synchronize()
out["workload_s"] = t() - a
a = t(); w._backward(cudnn, True); out["rebuild_same_process_s"] = t() - a
other = copy.copy(w)
other.handle = cudnn.create_handle()
a = t(); w._backward(cudnn, True); other._backward(cudnn, False); out["two_sequential_s"] = t() - a
pairs = ((w, True), (other, False))
threads = [threading.Thread(target=x._backward, args=(cudnn, k)) for x, k in pairs]
a = t()
for th in threads: th.start()
for th in threads: th.join()
out["two_threads_s"] = t() - a
g, _ = w.backward[True]
try:
    a = t(); data = g.serialize(); out["serialize_s"] = t() - a; out["serialized_bytes"] = len(data)
    fresh = cudnn.pygraph(handle=w.handle)
    a = t()
    try:
        fresh.deserialize(w.handle, data)
    except TypeError:
        fresh.deserialize(data)
    out["deserialize_s"] = t() - a
except Exception as exc:
    out["serialize_error"] = f"{type(exc).__name__}: {exc}"[:500]
print(json.dumps(out))
"""


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, PYTHONDONTWRITEBYTECODE="1", **extra)


def _size_mb(root: Path) -> float:
    return round(sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 1e6, 1)


def _script(code: str, *args: str, timeout: float = 600) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=_env(), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    if done.returncode != 0 or not done.stdout.strip():
        return {"error": done.stderr[-3000:]}
    doc: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return doc


def _params(cache: Path, pins: dict[str, str]) -> dict[str, Any]:
    return {
        "family": "sm_90",
        "subjects": None,
        "start_configs": pins,
        "comparison": [
            {"subject": s, "family": "sm_90", "config": c, "series": 1} for s, c in pins.items()
        ],
        "compile_cache_dir": str(cache),
        "compile_cache_key": "stage-profile",
        "launched_at": time.time(),
    }


def stage_run(
    out: Path, cache: Path, pins: dict[str, str], tag: str, profile: Path | None, keep: bool
) -> Any:
    """One determinism stage in a fresh interpreter with a HOME of its own (the driver's cache of
    compiled kernels emptied first unless ``keep``): its wall and its timings."""
    if not keep:
        shutil.rmtree(cache / "cuda", ignore_errors=True)
    (cache / "cuda").mkdir(exist_ok=True)
    params_path, doc_path = out / f"params-{tag}.json", out / f"doc-{tag}.json"
    home = out / f"home-{tag}"
    home.mkdir()
    env = _env(HOME=str(home), TMPDIR=str(home), CUDA_CACHE_PATH=str(cache / "cuda"))
    params_path.write_text(json.dumps(_params(cache, pins)))
    prefix = ["-m", "cProfile", "-o", str(profile)] if profile else []
    argv = [sys.executable, *prefix, "-m", STAGE, "--in", str(params_path), "--out", str(doc_path)]
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if done.returncode != 0 or not doc_path.exists():
        return {"tag": tag, "wall_s": wall, "error": done.stderr[-3000:]}
    doc = json.loads(doc_path.read_text())
    timings = doc.get("timings") or {}
    phases = {k: v for k, v in timings.items() if k != "stage"}
    checks = {c["name"]: c["status"] for c in doc.get("checks") or []}
    return {"tag": tag, "wall_s": round(wall, 3), "stage": timings.get("stage"),
            "subjects": phases, "checks": checks, "status": doc.get("status")}  # fmt: skip


def profile_text(prof: Path, top: int) -> str:
    parts = []
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        pstats.Stats(str(prof), stream=buf).sort_stats(key).print_stats(top)
        parts.append(f"==== by {key}\n{buf.getvalue()}")
    return "\n".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--state", type=Path, required=True, help="the compile cache, kept")
    ap.add_argument("--out", type=Path, required=True, help="the report and the profile")
    ap.add_argument("--work", type=Path, default=Path("/tmp/stage-profile"), help="the runs' files")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--parts", default="stage,profile,imports,fork,graphs")
    ap.add_argument("--pins", default=json.dumps(PINS))
    ap.add_argument("--top", type=int, default=70)
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    pins: dict[str, str] = json.loads(args.pins)
    args.out.mkdir(parents=True, exist_ok=True)
    args.state.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    cuda = args.state / "cuda"
    report: dict[str, Any] = {"pins": pins}

    def save() -> None:
        (args.out / "stage_profile.json").write_text(json.dumps(report, indent=1))

    if "stage" in parts:
        runs = []
        for mode, kept in (("fresh", False), ("kept", True)):
            for i in range(args.rounds + 1):
                tag = f"{mode}{i}"
                runs.append(stage_run(args.work, args.state, pins, tag, None, kept))
                print(json.dumps(runs[-1])[:1500], flush=True)
        report["stage"] = runs
        report["cuda_cache_mb"] = _size_mb(cuda) if cuda.is_dir() else None
        save()
    if "profile" in parts:
        prof = args.work / "stage.prof"
        report["profiled"] = stage_run(args.work, args.state, pins, "profiled", prof, True)
        if prof.exists():
            (args.out / "profile.txt").write_text(profile_text(prof, args.top))
        save()
    if "imports" in parts:
        mods = ",".join([*PRELOAD, "cudnn"])
        report["imports"] = _script(IMPORTS, mods, ",".join(pins))
        print(json.dumps(report["imports"]), flush=True)
        save()
    if "fork" in parts:
        report["fork"] = _script(FORK, ",".join(PRELOAD))
        print(json.dumps(report["fork"]), flush=True)
        save()
    if "graphs" in parts and "sdpa_bwd" in pins:
        report["graphs"] = _script(GRAPHS, pins["sdpa_bwd"])
        print(json.dumps(report["graphs"]), flush=True)
        save()


if __name__ == "__main__":
    main()
