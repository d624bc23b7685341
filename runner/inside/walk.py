"""The config walk: from the remembered config (or the smallest) up, until the control varies.

``pick_config`` walks a subject's configs from small to large, starting at the one remembered for
this family, until the control arm (knob off, ``repeats`` runs) varies in at least
``control_share`` of its comparisons with run 0; never down. The comparison point alone comes
first wherever it lies (the comparison needs its workload anyway), and is enough where its
control can certify. When no config reaches the share and
the best one cannot certify anything, ``_walk_on`` samples its control again before giving up.
Each config is compiled (its inputs built, one knob-off warm-up run) before its control runs.
Standard library and torch only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from core import harness
from runner.inside import stats
from runner.inside.arms import Arm, run_control
from runner.inside.subjects.base import Config, Subject, Workload, synchronize


@dataclass
class Settings:
    repeats: int = harness.REPEATS
    max_repeats: int = harness.MAX_REPEATS
    luck_target: float = harness.LUCK_TARGET
    control_share: float = harness.CONTROL_SHARE
    negative_control: bool = False


@dataclass
class Tried:
    config: Config
    workload: Workload
    control: Arm
    compile_s: float


def _prepare(
    subject: Subject, config: Config, device: torch.device
) -> tuple[Workload, float, float]:
    """Build the inputs and compile the control arm's kernels, outside any timed run.

    Returns the workload, the seconds the inputs took and the seconds of the warm-up (compile).
    The deterministic arm is warmed up (``warm_up``) only at the config the walk chooses: a
    config left behind never compiles a kernel nothing would run.
    """
    synchronize(device)
    start = time.perf_counter()
    workload = subject.prepare(config, device)
    synchronize(device)
    inputs = time.perf_counter()
    return workload, inputs - start, warm_up(workload, device, knob=False)


def warm_up(workload: Workload, device: torch.device, *, knob: bool) -> float:
    """One untimed, uncompared call of an arm (its compile, if any): the seconds it took."""
    synchronize(device)
    start = time.perf_counter()
    workload.run(knob)
    synchronize(device)
    return time.perf_counter() - start


@dataclass
class Walked:
    """Where the walk settled (``best``), each config it tried (``history``), why, and the
    comparison point's workload when the walk tried it and settled elsewhere (``at_point``):
    the comparison measures on it instead of building it again."""

    best: Tried
    history: list[dict[str, Any]]
    why: str
    at_point: Tried | None = None
    start: str | None = None  # where it started: the remembered config, or the point


def pick_config(
    subject: Subject,
    device: torch.device,
    s: Settings,
    start: str | None,
    start_from: int | None = None,
    pin: str | None = None,
    point: str | None = None,
) -> Walked:
    """Escalate from ``start`` (or the smallest) until the control varies enough; never shrink.

    ``start_from`` is the build that chose ``start``, said in the reason. ``pin`` (a repro
    line's ``--config``) runs that config alone, whatever its control does. ``point`` (the
    comparison point) is tried first, wherever the walk starts: the comparison builds it anyway,
    and there a control that can certify is enough (more deterministic runs cost milliseconds;
    another workload, seconds: on the H200 a pinned config measured apart from the walk's cost
    2.5-5.7 s a subject in every warm build). With nothing remembered the walk starts there.
    """
    names = [c.name for c in subject.configs]
    start_is = "remembered config"
    if start is None and pin is None and point in names:
        start, start_is = point, "no remembered config; the comparison point"
    if pin is not None and pin not in names:
        raise ValueError(f"{subject.name} has no config {pin!r}; configs: {', '.join(names)}")
    begin = pin if pin is not None else start
    first = names.index(begin) if begin in names else 0
    configs = subject.configs[first : first + 1] if pin is not None else subject.configs[first:]
    if pin is None and point in names:
        at = names.index(point)  # the comparison point first, then the walk without it
        configs = (subject.configs[at], *(c for c in configs if c.name != point))
    history: list[dict[str, Any]] = []
    best: Tried | None = None
    at_point: Tried | None = None
    settled_at_point = False
    for config in configs:
        workload, inputs_s, warmup_s = _prepare(subject, config, device)
        took = inputs_s + warmup_s
        t0 = time.perf_counter()
        control = run_control(workload, device, s.repeats)
        history.append(
            {
                "config": config.name,
                "varying": control.varying_runs,
                "comparisons": control.comparisons,
                "compile_s": round(took, 3),  # inputs_s + warmup_s
                "run_s": round(control.run_s, 3),
                "inputs_s": round(inputs_s, 3),
                "warmup_s": round(warmup_s, 3),
                "control_s": round(time.perf_counter() - t0, 3),
            }
        )
        tried = Tried(config, workload, control, took)
        if best is None or control.share >= best.control.share:
            best = tried
        if control.share >= s.control_share:
            break
        if config.name == point and certifiable(control, s):
            best, settled_at_point = tried, True
            break
        if config.name == point:
            at_point = tried
        del workload, tried
    assert best is not None, f"{subject.name} has no configs"
    if at_point is best:
        at_point = None
    walked_on = _walk_on(best, device, s, history)
    k, n = best.control.varying_runs, best.control.comparisons
    source = f" from build #{start_from}" if start_from is not None else ""
    if start in names:
        remembered = f"{start_is} {start}{source}"
    elif start:
        remembered = f"{start_is} {start}{source} is not a config of this subject"
    else:
        remembered = "no remembered config"
    if pin is not None:
        remembered = f"config {pin} pinned by --config"
    if settled_at_point and best.control.share < s.control_share:
        why = (
            f"{remembered}; the comparison point {point}: its control varied in {k} of {n} "
            f"comparisons, enough to certify within {s.max_repeats} runs"
        )
    elif best.control.share >= s.control_share:
        if best.config.name == start:
            why = f"{remembered}: its control still varied in {k} of {n} comparisons"
        elif best.config.name == point:
            why = f"{remembered}; the comparison point {point}: its control varied in {k} of {n}"
        else:
            why = (
                f"{remembered}; first config from {names[first]} up whose control varied in "
                f"{k} of {n} comparisons (>= {s.control_share:g})"
            )
    elif k:
        why = (
            f"{remembered}; no config reached a control share of {s.control_share:g}; "
            f"{best.config.name} varied most ({k} of {n})"
        )
    else:
        why = f"{remembered}; the control never varied at any config from {names[first]} up"
    if walked_on:
        why += (
            f"; walked on at {best.config.name}: {walked_on} more control runs "
            f"({k} of {n} comparisons varied in all)"
        )
    return Walked(best, history, why, at_point, start)


def certifiable(control: Arm, s: Settings) -> bool:
    """Whether the deterministic arm can reach the luck target within the run cap, given this
    control: the one condition under which exactness can pass rather than end inconclusive."""
    k, n = control.varying_runs, control.comparisons
    if not k:
        return False
    needed = stats.comparisons_needed(stats.clopper_pearson_lower(k, n), s.luck_target)
    return needed is not None and needed + 1 <= s.max_repeats


def _walk_on(best: Tried, device: torch.device, s: Settings, history: list[dict[str, Any]]) -> int:
    """When no config reached the share and the best one cannot certify, sample its control
    again, ``repeats`` runs at a time, until it can, or it reaches the share, or it has
    ``max_repeats`` runs: the number of runs added.

    Variation comes in bursts: a config that varied in 7 of 7 runs can vary in none of the next
    7 (measured on an H200, sdpa_bwd at b4 h16 s2048). A remembered config at the top of the
    walk, quiet in one sample, has nowhere higher to go; without this, one quiet sample makes a
    genuine build ``inconclusive``. More runs of the same control arm (still compared with its
    run 0) only add evidence; a control that never varies still ends inconclusive.
    """
    added = 0
    control = best.control
    while (
        control.share < s.control_share
        and not certifiable(control, s)
        and control.runs < s.max_repeats
    ):
        more = min(s.repeats, s.max_repeats - control.runs)
        t0 = time.perf_counter()
        run_s = control.run_s
        for _ in range(more):
            control.run_once(best.workload, device)
        added += more
        history.append(
            {
                "config": best.config.name,
                "resampled": True,
                "varying": control.varying_runs,
                "comparisons": control.comparisons,
                "compile_s": 0.0,
                "run_s": round(control.run_s - run_s, 3),
                "inputs_s": 0.0,
                "warmup_s": 0.0,
                "control_s": round(time.perf_counter() - t0, 3),
            }
        )
    return added


def steps(history: list[dict[str, Any]]) -> int:
    """Configs tried beyond the first (a control sampled again at one config is no step)."""
    return sum(1 for h in history if not h.get("resampled")) - 1
