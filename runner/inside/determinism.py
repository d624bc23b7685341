"""The determinism and numerics stages: run each subject's backward repeatedly and compare bytes.

``python -m runner.inside.determinism --in PARAMS.json --out RESULT.json``, in the candidate's
environment (standard library, torch and the candidate only). For one subject:

1. walk its configs from small to large (starting at the one remembered for this family) until the
   control arm, knob off, varies in at least ``control_share`` of its comparisons with run 0;
2. run the deterministic arm, knob on, on the same inputs until the luck probability
   ``(1 - p_lo) ** m`` is below ``luck_target`` or ``max_repeats`` runs are spent, where ``p_lo``
   is the control's one-sided 95% Clopper-Pearson lower bound (``stats``);
3. ``pass`` = deterministic arm byte-exact and finite, control varied, luck target met;
   ``inconclusive`` = exact but the control never varied or the run cap came first; ``fail`` =
   the deterministic arm varied or any output was not finite;
4. numerics: the deterministic arm's first run against a float32 reference, within the subject's
   stated tolerances.

Bytes are compared through ``t.contiguous().view(torch.uint8)`` with a SHA-256 digest per run, so
-0.0 and +0.0 differ and a NaN can never read as "stable". Compiling happens in a warm-up before
any timed run; compile and run seconds are reported apart. ``negative_control`` runs the
deterministic arm with the knob off: its checks come out ``fail`` or ``inconclusive``, never
``pass``.
"""

from __future__ import annotations

import importlib
import logging
import math
import platform
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from runner.inside import bits, compileonly, stats
from runner.inside.arms import Arm, run_control, run_deterministic
from runner.inside.comparable import pick_start_configs
from runner.inside.documents import CheckDoc, DeterminismDoc, DriftDoc, FindingDoc
from runner.inside.numerics import check_numerics
from runner.inside.registry import SUBJECTS, family_of
from runner.inside.subjects.base import (
    COMPILE_ARCH,
    Config,
    Subject,
    Workload,
    configure_compile_cache,
    knob_present,
    synchronize,
)

# ---------------------------------------------------------------- one subject


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


# ---------------------------------------------------------------- the stage

log = logging.getLogger("fe_ci.inside.determinism")


def _available(name: str, caps: Mapping[str, Any] | None) -> tuple[bool, str]:
    """Whether this build has the subject and its knob: the probe's answer, else a local look."""
    entry = SUBJECTS[name]
    cap = (caps or {}).get(name)
    if cap is None:
        return knob_present(entry.entry_point, entry.knob, entry.probe_method)
    if not cap.get("importable"):
        return (
            False,
            f"{entry.entry_point} is not importable: {cap.get('error') or 'import failed'}",
        )
    if not cap.get("present"):
        return False, f"this build's {entry.entry_point} has no '{entry.knob}'"
    return True, ""


def _check(name: str, status: str, detail: str) -> CheckDoc:
    return {"name": name, "status": status, "detail": detail, "metrics": {}}


def _roll_up(checks: list[CheckDoc], what: str) -> tuple[str, str]:
    """A stage's status from its checks: fail > error > inconclusive > pass > skipped > n/a."""
    statuses = [c["status"] for c in checks]
    summary = "; ".join(f"{c['name']} {c['status']}" for c in checks) or f"no {what} checks"
    for status in ("fail", "error", "inconclusive", "pass", "skipped"):
        if status in statuses:
            return status, summary
    return "not_applicable", summary


def _environment(device: torch.device | None) -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    if device is not None:
        major, minor = torch.cuda.get_device_capability(device)
        env.update(gpu=torch.cuda.get_device_name(device), arch=f"sm_{major}{minor}")
    try:
        import cudnn

        env["cudnn_backend"] = str(cudnn.backend_version_string())
    except Exception:  # the backend version is informative; its absence is not a failure
        version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        env["cudnn_backend"] = str(version) if version else None
    return env


def _with_compile_only(
    name: str,
    doc: dict[str, Any],
    check: CheckDoc,
    checks: list[CheckDoc],
    findings: list[FindingDoc],
) -> None:
    """Attach a compile-only result (``compileonly.collect``) to a skipped subject.

    A pass stays in the skipped check's detail and metrics, never a check of its own: compiling
    is not running, so it must not count as covering the subject. A failed compile is a check
    that fails; a harness that does not fit this build is a warning.
    """
    check["metrics"]["compile_only"] = doc
    where = "here"
    if doc.get("reused"):
        source = doc.get("reused_from") or {}
        where = (
            f"by an earlier stage of compile cache key {str(source.get('key'))[:12]} "
            f"({source.get('stored_at')}), reused"
        )
    if doc.get("status") == "pass":
        det, default = doc["deterministic"], doc["default"]
        changes = "changes" if doc.get("knob_changes_kernel") else "does NOT change"
        check["detail"] += (
            f"; compile-only: both {COMPILE_ARCH} kernels compiled {where} (deterministic "
            f"{det['compile_s']:.1f} s, default {default['compile_s']:.1f} s; the knob {changes} "
            "the kernel)"
        )
    elif doc.get("status") == "fail":
        reason = str(doc.get("reason"))
        if doc.get("reused"):
            reason += f" (compiled {where})"
        checks.append(_check(f"{name}.compile_only", "fail", reason))
    else:
        findings.append(
            {
                "kind": "compile_only_unavailable",
                "severity": "warning",
                "subject": name,
                "message": f"could not compile {name} for {COMPILE_ARCH} here: {doc.get('reason')}",
            }
        )


def _start_configs(
    params: Mapping[str, Any], family: str | None, environment: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """``{subject: {"config", "build_id", ...}}``: where each subject's escalation starts.

    ``remembered`` (from the service's lease or ``--previous``) is matched against this host's GPU
    model and cuDNN backend; ``start_configs`` (``{subject: config}``) is used as given.
    """
    starts = pick_start_configs(
        params.get("remembered") or [],
        family=family,
        gpu=environment.get("gpu"),
        cudnn_backend=environment.get("cudnn_backend"),
    )
    for subject, config in (params.get("start_configs") or {}).items():
        if isinstance(config, str):
            starts[subject] = {"subject": subject, "config": config, "build_id": None}
    return starts


def _pin_problem(name: str, pin: str | None) -> str:
    """Why ``--config`` cannot apply to this subject ("" when it can, or when none was given)."""
    if pin is None:
        return ""
    names = [c.name for c in SUBJECTS[name].load().configs]
    return "" if pin in names else f"{name} has no config {pin!r}; configs: {', '.join(names)}"


def _settings(params: Mapping[str, Any]) -> Settings:
    return Settings(
        repeats=max(int(params.get("repeats") or 8), 2),
        max_repeats=int(params.get("max_repeats") or 64),
        luck_target=float(params.get("luck_target") or 1e-3),
        control_share=float(params.get("control_share") or 0.5),
        negative_control=bool(params.get("negative_control")),
    )


def _status_of(
    name: str, caps: Any, device: torch.device | None, family: str | None, pin: str | None
) -> tuple[str, str]:
    """("", "") when the subject runs here, else the status and reason of its check."""
    ok, why = _available(name, caps)
    if not ok:
        return "not_applicable", why
    pinned = _pin_problem(name, pin)
    if pinned:
        return "error", pinned
    if device is None:
        return "skipped", "no CUDA GPU on this host"
    if family not in SUBJECTS[name].families:
        return "skipped", f"needs {' or '.join(SUBJECTS[name].families)}"
    return "", ""


def _measure(
    name: str,
    device: torch.device,
    settings: Settings,
    start: Mapping[str, Any],
    pin: str | None,
) -> tuple[Outcome, float]:
    """One GPU subject's outcome, and the seconds its module (the frontend with it) took to load."""
    t0 = time.perf_counter()
    harness = SUBJECTS[name].load()
    imported = time.perf_counter() - t0
    outcome = measure_subject(
        harness,
        device,
        settings,
        start_config=start.get("config"),
        start_from=start.get("build_id"),
        pin_config=pin,
        log=log.info,
    )
    return outcome, imported


def _ready_s(params: Mapping[str, Any]) -> float | None:
    """Seconds from the runner's launch of this process (``launched_at``, epoch) until now."""
    launched = params.get("launched_at")
    if not isinstance(launched, int | float) or not math.isfinite(launched):
        return None
    return round(max(time.time() - float(launched), 0.0), 3)


def run(params: dict[str, Any]) -> DeterminismDoc:
    """The stage document: determinism checks and drift, with the numerics stage under a key.

    ``timings["stage"]`` splits the stage's wall time: ``ready_s`` (launch to ready: interpreter,
    imports, CUDA initialised), ``cuda_init_s``, ``environment_s``, ``subjects_s`` (the GPU
    subjects) and ``compile_only_wait_s`` (waiting, after them, for the background compile-only
    runs); ``timings[<subject>]`` each GPU subject's phases or a compile-only subject's wall time.
    """
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    entered = time.perf_counter()
    cache = configure_compile_cache(
        params.get("compile_cache_dir"), params.get("compile_cache_key")
    )
    settings = _settings(params)
    names = [n for n in SUBJECTS if n in (params.get("subjects") or SUBJECTS)]
    t0 = time.perf_counter()
    gpu = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if gpu else None
    if device is not None:
        torch.zeros(1, device=device)  # the context now, not in the first subject's inputs
    cuda_init_s = time.perf_counter() - t0
    family = params.get("family")
    if family is None and device is not None:
        family = family_of(*torch.cuda.get_device_capability(device))
    caps = params.get("capabilities") or None
    t0 = time.perf_counter()
    environment = _environment(device)
    environment_s = time.perf_counter() - t0
    stage_t: dict[str, Any] = {
        "ready_s": _ready_s(params),
        "cuda_init_s": round(cuda_init_s, 3),
        "environment_s": round(environment_s, 3),
    }
    starts = _start_configs(params, family, environment)
    pin = params.get("pin_config")
    status_of = {name: _status_of(name, caps, device, family, pin) for name in names}
    # the compile-only runs need no GPU: started now, they overlap each other and the GPU subjects
    cache_dir = cache.get("dir")
    cache_key = cache.get("key") if cache_dir else None
    background = {
        name: compileonly.start(name, cache_dir=cache_dir, key=cache_key)
        for name in names
        if status_of[name][0] == "skipped"
        and name in compileonly.COMPILE_ONLY
        and params.get("compile_only", True)
    }
    try:
        doc = _run_subjects(
            names,
            status_of,
            device,
            settings,
            starts,
            background,
            (cache_dir, cache_key),
            (family, environment, pin),
        )
    finally:
        for pending in background.values():
            pending.stop()
    timings = doc["timings"]
    stage_t.update(doc.pop("stage_timings"))
    stage_t["total_s"] = round(time.perf_counter() - entered, 3)
    timings["stage"] = stage_t
    status, reason = _roll_up(doc["checks"], "determinism")
    num_status, num_reason = _roll_up(doc["numerics"], "numerics")
    if device is None and status not in ("error", "fail"):  # a bad --config still says so
        status, reason = "skipped", "no CUDA GPU on this host"
        num_status, num_reason = "skipped", reason
    return {
        "status": status,
        "reason": reason,
        "checks": doc["checks"],
        "drift": doc["drift"],
        "findings": doc["findings"],
        "numerics": {"status": num_status, "reason": num_reason, "checks": doc["numerics"]},
        "chosen_configs": doc["chosen"],
        "timings": timings,
        "negative_control": settings.negative_control,
        "family": family,
        "compile_cache": cache,
        "start_configs": starts,
        "environment": environment,
    }


def _run_subjects(
    names: list[str],
    status_of: Mapping[str, tuple[str, str]],
    device: torch.device | None,
    settings: Settings,
    starts: Mapping[str, Mapping[str, Any]],
    background: Mapping[str, compileonly.Pending],
    cache: tuple[str | None, str | None],
    where: tuple[str | None, dict[str, Any], str | None],
) -> dict[str, Any]:
    """Every subject in order: the GPU ones measured here, the compile-only ones collected last.

    ``cache`` is the compile cache's (dir, key); ``where`` the (family, environment, pinned config)
    that a check's comparable key and a repro line's ``--config`` come from.
    """
    cache_dir, cache_key = cache
    family, environment, pin = where
    checks: list[CheckDoc] = []
    numerics: list[CheckDoc] = []
    drift: list[DriftDoc] = []
    chosen: dict[str, str] = {}
    timings: dict[str, dict[str, Any]] = {}
    findings: list[FindingDoc] = []
    skipped_checks: dict[str, CheckDoc] = {}
    t0 = time.perf_counter()
    for name in names:
        subject = SUBJECTS[name]
        status, detail = status_of[name]
        if status:
            check = _check(f"{name}.deterministic", status, detail)
            checks.append(check)
            skipped_checks[name] = check
            numerics += [_check(f"{name}.{out}", status, detail) for out in subject.outputs]
            continue
        assert device is not None
        try:
            outcome, import_s = _measure(name, device, settings, starts.get(name) or {}, pin)
        except Exception as exc:  # one subject's crash must not hide the others' results
            log.exception("subject=%s error", name)
            reason = f"{type(exc).__name__}: {exc}"[:2000]
            checks.append(_check(f"{name}.deterministic", "error", reason))
            numerics += [_check(f"{name}.{out}", "error", reason) for out in subject.outputs]
            continue
        finally:
            if device is not None:
                torch.cuda.empty_cache()
        outcome.check["metrics"]["comparable"] = bits.comparable(
            name,
            outcome.config or "",
            family,
            environment,
            bits.inputs_id(importlib.import_module(subject.module_name).__file__),
        )
        checks.append(outcome.check)
        numerics += outcome.numerics
        drift += outcome.drift
        if outcome.config:
            chosen[name] = outcome.config
        timings[name] = {
            "compile_s": round(outcome.compile_s, 3),
            "run_s": round(outcome.run_s, 3),
            "escalation_steps": outcome.check["metrics"]["escalation_steps"],
            "import_s": round(import_s, 3),
            **outcome.phases,
        }
    subjects_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for name, pending in background.items():
        doc = compileonly.collect(pending, cache_dir=cache_dir, key=cache_key)
        _with_compile_only(name, doc, skipped_checks[name], checks, findings)
        timings[name] = {"compile_only_s": doc["wall_s"], "reused": bool(doc.get("reused"))}
    return {
        "checks": checks,
        "numerics": numerics,
        "drift": drift,
        "chosen": chosen,
        "timings": timings,
        "findings": findings,
        "stage_timings": {
            "subjects_s": round(subjects_s, 3),
            "compile_only_wait_s": round(time.perf_counter() - t0, 3),
        },
    }


if __name__ == "__main__":
    from runner.inside._io import run_stage

    raise SystemExit(run_stage(run))
