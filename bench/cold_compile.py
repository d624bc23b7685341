"""What a cold determinism stage compiles, and what of it can overlap (CUDA GPU only).

Each trial runs in a fresh interpreter with an empty kernel cache, as a new candidate's first
determinism stage does, and times the GPU subjects' compile work at their smallest configs:

- ``serial``: as the stage runs it today: flex_attention_bwd's inputs (its mask plan), its
  knob-off warm-up, its knob-on warm-up, then sdpa_bwd's inputs (its cuDNN graphs);
- ``sdpa_thread``: the same, with sdpa_bwd's inputs built in a second thread meanwhile;
- ``arms_threads``: flex_attention_bwd's two arms warmed up in two threads on one mask plan;
- ``det_sibling``: a second process warms flex_attention_bwd's knob-on arm into the same cache
  while this one builds the plan and warms the knob-off arm; then this one's knob-on warm-up;
- ``warm``: ``serial`` again on the cache ``serial`` left, for the floor.

    python3 bench/cold_compile.py --out cold-compile.json [--trials serial,det_sibling]

The frontend prints each CuTe kernel it compiles ("Compiled FlexAttention kernel in X s"); each
trial counts those lines and sums their seconds. Needs the frontend installed in this interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRIALS = ("serial", "sdpa_thread", "arms_threads", "det_sibling", "warm")
COMPILED = re.compile(r"Compiled FlexAttention kernel in ([0-9.]+)s")


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _trial(name: str, cache: str, out: Path) -> None:
    """One trial, in this (fresh) process; writes its figures as JSON to ``out``."""
    t_start = time.perf_counter()
    sys.path.insert(0, str(ROOT))
    import torch

    from runner.inside.subjects import flex_attention_bwd, sdpa_bwd
    from runner.inside.subjects.base import configure_compile_cache, synchronize
    from runner.inside.walk import warm_up

    configure_compile_cache(cache)
    device = torch.device("cuda", 0)
    torch.zeros(1, device=device)
    import cudnn.flex_attention  # noqa: F401  (the import, outside the timed phases)

    fig: dict[str, Any] = {"trial": name, "ready_s": time.perf_counter() - t_start}
    flex, sdpa = flex_attention_bwd.SUBJECT, sdpa_bwd.SUBJECT
    fcfg, scfg = flex.configs[0], sdpa.configs[0]

    def timed(key: str, fn: Any) -> Any:
        synchronize(device)
        t0 = time.perf_counter()
        value = fn()
        synchronize(device)
        fig[key] = round(time.perf_counter() - t0, 3)
        return value

    t0 = time.perf_counter()
    if name == "child_det":
        w = timed("flex_inputs_s", lambda: flex.prepare(fcfg, device))
        fig["flex_on_s"] = round(warm_up(w, device, knob=True), 3)
    elif name in ("serial", "warm"):
        w = timed("flex_inputs_s", lambda: flex.prepare(fcfg, device))
        fig["flex_off_s"] = round(warm_up(w, device, knob=False), 3)
        fig["flex_on_s"] = round(warm_up(w, device, knob=True), 3)
        timed("sdpa_inputs_s", lambda: sdpa.prepare(scfg, device))
    elif name == "sdpa_thread":
        side: dict[str, float] = {}

        def build_sdpa() -> None:
            s0 = time.perf_counter()
            sdpa.prepare(scfg, device)
            side["sdpa_inputs_s"] = round(time.perf_counter() - s0, 3)

        th = threading.Thread(target=build_sdpa)
        th.start()
        w = timed("flex_inputs_s", lambda: flex.prepare(fcfg, device))
        fig["flex_off_s"] = round(warm_up(w, device, knob=False), 3)
        fig["flex_on_s"] = round(warm_up(w, device, knob=True), 3)
        th.join()
        fig.update(side)
    elif name == "arms_threads":
        w = timed("flex_inputs_s", lambda: flex.prepare(fcfg, device))
        w2 = flex.prepare(fcfg, device)  # its plan comes from the cache the first one filled
        side = {}

        def arm(workload: Any, knob: bool) -> None:
            side[f"flex_{'on' if knob else 'off'}_s"] = round(
                warm_up(workload, device, knob=knob), 3
            )

        t1 = time.perf_counter()
        ths = [threading.Thread(target=arm, args=(x, k)) for x, k in ((w, False), (w2, True))]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        fig["arms_wall_s"] = round(time.perf_counter() - t1, 3)
        fig.update(side)
    elif name == "det_sibling":
        child = _spawn("child_det", cache, out.with_suffix(".child.json"))
        w = timed("flex_inputs_s", lambda: flex.prepare(fcfg, device))
        fig["flex_off_s"] = round(warm_up(w, device, knob=False), 3)
        t1 = time.perf_counter()
        child.wait()
        fig["sibling_wait_s"] = round(time.perf_counter() - t1, 3)
        fig["flex_on_s"] = round(warm_up(w, device, knob=True), 3)
        fig["sibling"] = json.loads(out.with_suffix(".child.json").read_text())
        timed("sdpa_inputs_s", lambda: sdpa.prepare(scfg, device))
    fig["work_s"] = round(time.perf_counter() - t0, 3)
    fig["cpu_s"] = round(_cpu_s(), 3)
    out.write_text(json.dumps(fig))


def _spawn(name: str, cache: str, out: Path) -> subprocess.Popen[str]:
    log = open(out.with_suffix(".log"), "w")  # noqa: SIM115  (the child's, closed by the OS)
    return subprocess.Popen(
        [sys.executable, __file__, "--trial", name, "--cache", cache, "--json", str(out)],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _run(name: str, cache: str, work: Path) -> dict[str, Any]:
    out = work / f"{name}.json"
    t0 = time.perf_counter()
    proc = _spawn(name, cache, out)
    rc = proc.wait()
    wall = time.perf_counter() - t0
    logs = "".join(p.read_text() for p in sorted(work.glob(f"{name}*.log")))
    seconds = [float(m) for m in COMPILED.findall(logs)]
    fig: dict[str, Any] = {"trial": name, "rc": rc, "wall_s": round(wall, 3)}
    if out.exists():
        fig.update(json.loads(out.read_text()))
    else:
        fig["log_tail"] = logs[-3000:]
    fig["kernels_compiled"] = len(seconds)
    fig["kernel_compile_s"] = round(sum(seconds), 3)
    fig["kernel_compile_each_s"] = seconds
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--trials", default=",".join(TRIALS))
    ap.add_argument("--trial", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.trial:
        _trial(args.trial, args.cache, args.json)
        return
    work = Path(tempfile.mkdtemp(prefix="cold-compile-"))
    results = []
    serial_cache = None
    for name in args.trials.split(","):
        if name not in TRIALS:
            raise SystemExit(f"unknown trial {name!r}; trials: {', '.join(TRIALS)}")
        if name == "warm" and serial_cache is None:
            raise SystemExit("the warm trial reuses the serial trial's cache: list serial first")
        cache = str(work / f"cache-{name}")
        if name == "warm" and serial_cache is not None:
            cache = serial_cache
        if name == "serial":
            serial_cache = cache
        fig = _run(name, cache, work)
        print(json.dumps(fig), flush=True)
        results.append(fig)
    doc = {"gpu": _gpu(), "cpus": os.cpu_count(), "trials": results}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


def _gpu() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"


if __name__ == "__main__":
    main()
