"""The comparison point: one config per subject and family, measured on every build.

The detection walk (``measure.pick_config``) may move from one build to the next; the comparison
does not. At the pinned config (the lease's, or, while nothing is pinned yet, the config the walk
chose) both arms run interleaved, in pairs whose order alternates (control then deterministic,
deterministic then control, ...), each run timed alone after the compile warm-ups, so a clock
that ramps during the measurement weighs on both arms alike. The deterministic arm's runs are
compared byte for byte with its run 0 and digested; the cost is the median deterministic run
over the median control run. The control runs are timed only: their bytes are the walk's
business, and copying a varying output to the host to hash it would cost more than the run.

A timed sample is ``runs_per_sample`` runs back to back, as many as make it about
``SAMPLE_TARGET_S`` long (sized from one untimed control run), after one untimed pair: on the
H200, samples of one sub-2 ms run each (``sdpa_torch_bwd``, ``indexer_top_k``) measured the same
genuine build's cost between 0.89x and 1.21x from build to build, launch gaps and the first
pairs' ramp in every sample, where a cuDNN graph's 1.6 ms runs held 1.09-1.11x.

Standard library and torch only (runs inside the candidate's environment).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import torch

from runner.inside import bits
from runner.inside.arms import Arm, repeated
from runner.inside.subjects.base import Config, Subject, Workload, synchronize

PAIRS_MIN = 8  # interleaved pairs at the least; ``repeats`` when it is larger
SAMPLE_TARGET_S = 0.01  # a timed sample's length at the least, where runs are shorter
RUNS_PER_SAMPLE_MAX = 32


def _timed_control(workload: Workload, device: torch.device, runs: int = 1) -> float:
    """The mean of ``runs`` control runs back to back, timed together."""
    timer = bits.RunTimer(device)
    synchronize(device)
    _out, took = timer.time(lambda: repeated(workload, False, runs))
    synchronize(device)
    return took / runs


def runs_per_sample(workload: Workload, device: torch.device) -> int:
    """How many runs back to back make a timed sample about ``SAMPLE_TARGET_S`` long, from one
    control run (itself untimed for the cost); one where a run is that long already."""
    return runs_for(_timed_control(workload, device))


def runs_for(run_s: float) -> int:
    """Runs of ``run_s`` each that make a sample of ``SAMPLE_TARGET_S`` (1 to the cap)."""
    if run_s <= 0:
        return RUNS_PER_SAMPLE_MAX
    return max(1, min(RUNS_PER_SAMPLE_MAX, math.ceil(SAMPLE_TARGET_S / run_s)))


def interleaved(
    workload: Workload, device: torch.device, pairs: int, *, knob: bool, runs: int = 1
) -> tuple[Arm, list[float]]:
    """``pairs`` samples of each arm, alternating which goes first, each ``runs`` runs back to
    back: the deterministic arm (with its digests) and the control's run times."""
    det = Arm("deterministic", knob=knob, stopped_by="comparison")
    control: list[float] = []
    for i in range(pairs):
        if i % 2 == 0:
            control.append(_timed_control(workload, device, runs))
            det.run_once(workload, device, runs)
        else:
            det.run_once(workload, device, runs)
            control.append(_timed_control(workload, device, runs))
    return det, control


def _warm(workload: Workload, device: torch.device) -> None:
    for knob in (False, True):  # each arm's compile, never timed
        workload.run(knob)
    synchronize(device)


def measure(
    subject: Subject,
    device: torch.device,
    *,
    config: str,
    pinned: dict[str, Any] | None,
    repeats: int,
    negative_control: bool,
    warm: tuple[str, Workload] | None = None,
) -> dict[str, Any]:
    """The comparison document of one subject at ``config``.

    ``warm`` is the walk's (config, workload), both arms already compiled: reused when it is
    the comparison's config. ``pinned`` is the lease's pin (``config``, ``series``), or None when
    the service has none yet for this subject and family (the walk's config is measured, and
    the service may pin it).
    """
    configs = {c.name: c for c in subject.configs}
    doc: dict[str, Any] = {
        "config_name": config,
        "pinned": pinned is not None,
        "series": (pinned or {}).get("series"),
        "negative_control": negative_control,
    }
    if config not in configs:
        doc["error"] = f"{subject.name} has no config {config!r}; configs: {', '.join(configs)}"
        return doc
    chosen: Config = configs[config]
    t0 = time.perf_counter()
    reused = warm is not None and warm[0] == config
    if warm is not None and reused:
        workload = warm[1]
    else:
        workload = subject.prepare(chosen, device)
        _warm(workload, device)
    compile_s = time.perf_counter() - t0
    pairs = max(repeats, PAIRS_MIN)
    t0 = time.perf_counter()
    runs = runs_per_sample(workload, device)
    for knob in (False, not negative_control):  # the untimed pair: the first ones ran slow
        repeated(workload, knob, runs)
    det, control = interleaved(workload, device, pairs, knob=not negative_control, runs=runs)
    cost = bits.cost(control, det.times, det.timer)
    cost.update(interleaved=True, runs_per_sample=runs)
    if control and det.times:
        cost["control_spread"] = _spread(control)
        cost["deterministic_spread"] = _spread(det.times)
        # each sample's mean run, in microseconds and in the order they ran: what the medians
        # came from
        cost["control_us"] = [round(t * 1e6, 1) for t in control]
        cost["deterministic_us"] = [round(t * 1e6, 1) for t in det.times]
    doc.update(
        config=chosen.describe(),
        reused_workload=reused,
        digests={name: o.digests[0] for name, o in det.outputs.items() if o.digests},
        sample={name: bits.sample(t) for name, t in det.first.items()},
        outputs={
            name: {"differing": o.differing, "distinct": len(set(o.digests)), "finite": o.finite}
            for name, o in det.outputs.items()
        },
        cost=cost,
        compile_s=round(compile_s, 3),
        run_s=round(time.perf_counter() - t0, 3),
    )
    return doc


def _spread(times: list[float]) -> float:
    """(max - min) / median of one arm's run times: how steady the GPU was while it ran."""
    mid = statistics.median(times)
    return round((max(times) - min(times)) / mid, 4) if mid > 0 else 0.0
