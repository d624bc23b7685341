"""One subject's determinism verdict: the config walk, the two arms, the judgement, the numerics.

``measure_subject`` runs, on one device:

1. walk the subject's configs from small to large (starting at the one remembered for this family)
   until the control arm, knob off, varies in at least ``control_share`` of its comparisons with
   run 0 (``pick_config``);
2. run the deterministic arm, knob on, on the same inputs until the luck probability
   ``(1 - p_lo) ** m`` is below ``luck_target`` or ``max_repeats`` runs are spent, where ``p_lo``
   is the control's one-sided 95% Clopper-Pearson lower bound (``stats``);
3. ``pass`` = deterministic arm byte-exact and finite, control varied, luck target met;
   ``inconclusive`` = exact but the control never varied or the run cap came first; ``fail`` =
   the deterministic arm varied or any output was not finite;
4. numerics: the deterministic arm's first run against a float32 reference, within the subject's
   stated tolerances (``numerics``).

Compiling happens in a warm-up before any timed run; compile and run seconds are reported apart.
``negative_control`` runs the deterministic arm with the knob off: its checks come out ``fail`` or
``inconclusive``, never ``pass``. Standard library and torch only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from runner.inside import bits, stats
from runner.inside.arms import Arm, run_control, run_deterministic
from runner.inside.documents import CheckDoc, DriftDoc
from runner.inside.numerics import check_numerics
from runner.inside.subjects.base import Config, Subject, Workload, synchronize


@dataclass
class Settings:
    repeats: int = 8
    max_repeats: int = 64
    luck_target: float = 1e-3
    control_share: float = 0.5
    negative_control: bool = False


@dataclass
class Tried:
    config: Config
    workload: Workload
    control: Arm
    compile_s: float


@dataclass
class Outcome:
    """What one subject contributed: checks for both stages, drift rows, config and timings."""

    check: CheckDoc
    numerics: list[CheckDoc]
    drift: list[DriftDoc]
    config: str | None
    compile_s: float
    run_s: float
    # wall seconds per phase: inputs_s, warmup_s (compiling), control_s and deterministic_s
    # (runs with their digests), numerics_s (the float32 reference and the comparison)
    phases: dict[str, float] = field(default_factory=dict)


def _prepare(
    subject: Subject, config: Config, device: torch.device
) -> tuple[Workload, float, float]:
    """Build the inputs and compile the control arm's kernels, outside any timed run.

    Returns the workload, the seconds the inputs took and the seconds of the warm-up (compile).
    The deterministic arm is warmed up (``_warm_up``) only at the config the walk chooses: a
    config left behind never compiles a kernel nothing would run.
    """
    synchronize(device)
    start = time.perf_counter()
    workload = subject.prepare(config, device)
    synchronize(device)
    inputs = time.perf_counter()
    return workload, inputs - start, _warm_up(workload, device, knob=False)


def _warm_up(workload: Workload, device: torch.device, *, knob: bool) -> float:
    """One untimed, uncompared call of an arm (its compile, if any): the seconds it took."""
    synchronize(device)
    start = time.perf_counter()
    workload.run(knob)
    synchronize(device)
    return time.perf_counter() - start


def pick_config(
    subject: Subject,
    device: torch.device,
    s: Settings,
    start: str | None,
    start_from: int | None = None,
    pin: str | None = None,
) -> tuple[Tried, list[dict[str, Any]], str]:
    """Escalate from ``start`` (or the smallest) until the control varies enough; never shrink.

    ``start_from`` is the build that chose ``start``, said in the reason. ``pin`` (a repro line's
    ``--config``) runs that config alone, whatever its control does.
    """
    names = [c.name for c in subject.configs]
    if pin is not None and pin not in names:
        raise ValueError(f"{subject.name} has no config {pin!r}; configs: {', '.join(names)}")
    begin = pin if pin is not None else start
    first = names.index(begin) if begin in names else 0
    configs = subject.configs[first : first + 1] if pin is not None else subject.configs[first:]
    history: list[dict[str, Any]] = []
    best: Tried | None = None
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
        del workload, tried
    assert best is not None, f"{subject.name} has no configs"
    k, n = best.control.varying_runs, best.control.comparisons
    source = f" from build #{start_from}" if start_from is not None else ""
    if start in names:
        remembered = f"remembered config {start}{source}"
    elif start:
        remembered = f"remembered config {start}{source} is not a config of this subject"
    else:
        remembered = "no remembered config"
    if pin is not None:
        remembered = f"config {pin} pinned by --config"
    if best.control.share >= s.control_share:
        if best.config.name == start:
            why = f"{remembered}: its control still varied in {k} of {n} comparisons"
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
    return best, history, why


def _judge(control: Arm, det: Arm, s: Settings) -> tuple[str, str]:
    k, n = control.varying_runs, control.comparisons
    bad = [
        f"{name} not finite in {arm.name} run {o.first_nonfinite_run}"
        for arm in (control, det)
        for name, o in arm.outputs.items()
        if not o.finite
    ]
    if bad:
        return "fail", "non-finite output: " + "; ".join(bad)
    varied = {name: o for name, o in det.outputs.items() if o.differing}
    if varied:
        parts = [
            f"{name} differed from run 0 in {o.differing} of {det.comparisons} runs "
            f"({len(set(o.digests))} distinct digests, max |d| {o.max_abs_diff:.3g})"
            for name, o in varied.items()
        ]
        return "fail", "deterministic arm varied: " + "; ".join(parts)
    exact = f"deterministic arm byte-exact over {det.runs} runs"
    if k == 0:
        return (
            "inconclusive",
            f"{exact}, but the control never varied (0 of {n}): nothing certified",
        )
    luck = det.luck_probability if det.luck_probability is not None else 1.0
    if luck >= s.luck_target:
        return "inconclusive", (
            f"{exact}; control varied in {k} of {n}, but the run cap ({s.max_repeats}) came before "
            f"the luck target: luck {luck:.3g} >= {s.luck_target:g}"
        )
    status, detail = "pass", f"{exact}; control varied in {k} of {n}; luck {luck:.3g}"
    if s.negative_control:
        status = "inconclusive"
        detail = f"negative control (knob off in the deterministic arm): {detail}; a match is luck"
    return status, detail


def measure_subject(
    subject: Subject,
    device: torch.device,
    settings: Settings,
    *,
    start_config: str | None = None,
    start_from: int | None = None,
    pin_config: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Outcome:
    """The whole determinism verdict for one subject, plus its numerics, on ``device``.

    ``start_config`` is the config remembered for this subject (chosen by build ``start_from``);
    the check's ``metrics.start`` says whether it was kept or escalated from.
    """
    s = settings
    best, history, why = pick_config(subject, device, s, start_config, start_from, pin_config)
    control = best.control
    k, n = control.varying_runs, control.comparisons
    p_lo = stats.clopper_pearson_lower(k, n) if n else 0.0
    det_warmup_s = _warm_up(best.workload, device, knob=not s.negative_control)
    compile_s = sum(h["compile_s"] for h in history) + det_warmup_s
    t0 = time.perf_counter()
    det = run_deterministic(
        best.workload,
        device,
        p_lo=p_lo,
        repeats=s.repeats,
        max_repeats=s.max_repeats,
        luck_target=s.luck_target,
        knob=not s.negative_control,
    )
    deterministic_s = time.perf_counter() - t0
    status, detail = _judge(control, det, s)
    if log:
        log(f"{subject.name}: {status} at {best.config.name}: {detail}")
    metrics = {
        "config": best.config.describe(),
        "config_name": best.config.name,
        "config_reason": why,
        "escalation": history,
        "control": {"varying": k, "comparisons": n, "share": round(control.share, 4)},
        "p_lo": p_lo,
        "luck_probability": det.luck_probability,
        "luck_target": s.luck_target,
        "deterministic_runs": det.runs,
        "stopped_by": det.stopped_by,
        "negative_control": s.negative_control,
        "start": _start_outcome(subject, start_config, start_from, best.config.name, history),
        "compile_s": round(compile_s, 3),  # the escalation's, and the deterministic warm-up
        "deterministic_warmup_s": round(det_warmup_s, 3),
        "run_s": round(sum(h["run_s"] for h in history) + det.run_s, 3),
        "escalation_steps": len(history) - 1,
        "outputs": {
            name: {"differing": o.differing, "distinct": len(set(o.digests)), "finite": o.finite}
            for name, o in det.outputs.items()
        },
        # what the next comparable build compares against (runner/inside/bits.py)
        "digests": {name: o.digests[0] for name, o in det.outputs.items() if o.digests},
        "sample": {name: bits.sample(t) for name, t in det.first.items()},
        "cost": bits.cost(control.times, det.times, det.timer),
    }
    check: CheckDoc = {
        "name": f"{subject.name}.deterministic",
        "status": status,
        "detail": f"{detail} (config {best.config.name}: {why})",
        "metrics": metrics,
    }
    t0 = time.perf_counter()
    numerics = check_numerics(subject.name, best.workload, det, best.config)
    for c in numerics:
        c["metrics"]["config_name"] = best.config.name
    phases = {
        key: round(sum(h[key] for h in history), 3) for key in ("inputs_s", "warmup_s", "control_s")
    }
    phases["warmup_s"] = round(phases["warmup_s"] + det_warmup_s, 3)
    phases.update(
        deterministic_s=round(deterministic_s, 3), numerics_s=round(time.perf_counter() - t0, 3)
    )
    metrics["phases"] = phases
    drift = control.drift_rows(subject.name, best.config) + det.drift_rows(
        subject.name, best.config
    )
    return Outcome(
        check=check,
        numerics=numerics,
        drift=drift,
        config=best.config.name,
        compile_s=compile_s,
        run_s=sum(h["run_s"] for h in history) + det.run_s,
        phases=phases,
    )


def _start_outcome(
    subject: Subject,
    start: str | None,
    start_from: int | None,
    chosen: str,
    history: list[dict[str, Any]],
) -> dict[str, Any] | None:
    """Where the walk began and what became of it: ``kept``, ``escalated`` or ``unknown``."""
    if not start:
        return None
    if start not in {c.name for c in subject.configs}:
        outcome = "unknown"  # the subject no longer has that config: walked from the smallest
    else:  # kept: the remembered config alone answered; escalated: the walk went upward
        outcome = "kept" if chosen == start and len(history) == 1 else "escalated"
    return {"config": start, "build_id": start_from, "outcome": outcome, "chosen": chosen}
