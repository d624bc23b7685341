"""One subject's determinism verdict: the config walk, the two arms, the judgement, the numerics.

``measure_subject`` runs, on one device:

1. walk the subject's configs from small to large (starting at the one remembered for this family)
   until the control arm, knob off, varies in at least ``control_share`` of its comparisons with
   run 0 (``walk.pick_config``), sampling the best one's control again before giving up;
2. run the deterministic arm, knob on, on the same inputs until the luck probability
   ``(1 - p_lo) ** m`` is below ``luck_target`` or ``max_repeats`` runs are spent, where ``p_lo``
   is the control's one-sided 95% Clopper-Pearson lower bound (``stats``);
3. ``pass`` = deterministic arm byte-exact and finite, control varied, luck target met;
   ``inconclusive`` = exact but the control never varied or the run cap came first; ``fail`` =
   the deterministic arm varied or any output was not finite;
4. numerics: the deterministic arm's first run against a float32 reference, within the subject's
   stated tolerances (``numerics``);
5. the comparison point: both arms interleaved at the subject's pinned config, wherever the walk
   went (``comparison``): the bits and the cost the next build compares against; here, or left
   to the caller (``defer``: the stage times every subject's comparison after every verdict).

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

from runner.inside import bits, comparison, stats, walk
from runner.inside.arms import Arm, run_deterministic
from runner.inside.documents import CheckDoc, DriftDoc
from runner.inside.numerics import check_numerics
from runner.inside.subjects.base import Subject
from runner.inside.walk import Settings

__all__ = ["Outcome", "Settings", "measure_subject"]


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
    # the comparison's timed runs where the caller asked to run them later (``defer``): they fill
    # ``check["metrics"]["comparison"]`` and ``phases["comparison_s"]``; None once measured
    compare: Callable[[], None] | None = None


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
    compare_at: dict[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
    quiet: Callable[[], None] | None = None,
    defer: bool = False,
) -> Outcome:
    """The whole determinism verdict for one subject, plus its numerics, on ``device``.

    ``start_config`` is the config remembered for this subject (chosen by build ``start_from``);
    the check's ``metrics.start`` says whether it was kept or escalated from. ``compare_at`` is
    the subject's comparison point (``{"config", "series"}``, from the lease): measured after the
    verdict, wherever the walk went; without one, the walk's config is measured the same way.
    ``quiet``, called before the comparison's timed runs, ends whatever runs beside them. With
    ``defer`` the comparison is not measured here but left in ``Outcome.compare`` (holding the
    workload it measures warm, if any), for a caller that measures every subject's verdict first
    and every comparison after (and calls ``quiet`` itself).
    """
    s = settings
    point = (compare_at or {}).get("config")
    walked = walk.pick_config(subject, device, s, start_config, start_from, pin_config, point)
    best, history, why = walked.best, walked.history, walked.why
    control = best.control
    k, n = control.varying_runs, control.comparisons
    p_lo = stats.clopper_pearson_lower(k, n) if n else 0.0
    det_warmup_s = walk.warm_up(best.workload, device, knob=not s.negative_control)
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
        "start": _start_outcome(subject, walked.start, start_from, best.config.name, history),
        "compile_s": round(compile_s, 3),  # the escalation's, and the deterministic warm-up
        "deterministic_warmup_s": round(det_warmup_s, 3),
        "run_s": round(sum(h["run_s"] for h in history) + det.run_s, 3),
        "escalation_steps": walk.steps(history),
        "resampled_rounds": sum(1 for h in history if h.get("resampled")),
        "outputs": {
            name: {"differing": o.differing, "distinct": len(set(o.digests)), "finite": o.finite}
            for name, o in det.outputs.items()
        },
        # the arms at the walk's config, run one after the other; what the next build compares
        # against is ``comparison``, measured at the comparison point with the arms interleaved
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
    chosen = best.config.name
    t0 = time.perf_counter()
    at = point or chosen
    warm = (chosen, best.workload) if at == chosen else None
    if walked.at_point is not None and at == walked.at_point.config.name:
        warm = (at, walked.at_point.workload)  # tried by the walk, both arms now compiled
        walk.warm_up(walked.at_point.workload, device, knob=not s.negative_control)
    del best, walked  # a comparison point elsewhere needs the memory of the walk's workload
    warm_s = time.perf_counter() - t0

    def compare() -> None:
        t0 = time.perf_counter()
        try:
            metrics["comparison"] = comparison.measure(
                subject,
                device,
                config=at,
                pinned=compare_at,
                repeats=s.repeats,
                negative_control=s.negative_control,
                warm=warm,
            )
        except Exception as exc:  # the verdict stands; only this build's comparison is lost
            reason = f"{type(exc).__name__}: {exc}"[:500]
            metrics["comparison"] = {"config_name": at, "pinned": compare_at is not None}
            metrics["comparison"]["error"] = reason
        phases["comparison_s"] = round(warm_s + time.perf_counter() - t0, 3)
        outcome.compare = None

    outcome = Outcome(
        check=check,
        numerics=numerics,
        drift=drift,
        config=chosen,
        compile_s=compile_s,
        run_s=sum(h["run_s"] for h in history) + det.run_s,
        phases=phases,
        compare=compare,
    )
    if not defer:
        if quiet is not None:
            quiet()
        compare()
    return outcome


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
        outcome = "kept" if chosen == start and walk.steps(history) == 0 else "escalated"
    return {"config": start, "build_id": start_from, "outcome": outcome, "chosen": chosen}
