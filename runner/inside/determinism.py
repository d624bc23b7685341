"""The determinism and numerics stages: run each subject's backward repeatedly and compare bytes.

``python -m runner.inside.determinism --in PARAMS.json --out RESULT.json``, in the candidate's
environment (standard library, torch and the candidate only). This module is the stage: it reads
the parameters, decides which subjects run on this host, measures each in turn
(``measure.measure_subject``: the config walk, the control and deterministic arms of ``arms``, the
verdict and the ``numerics`` checks), starts and collects the compile-only runs of the subjects
this host cannot run (``compileonly``), and writes one document for both stages.

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
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch

from core.subjects import SUBJECTS, family_of
from runner.inside import ahead, bits, compileonly, plan
from runner.inside.documents import CheckDoc, DeterminismDoc, DriftDoc, FindingDoc
from runner.inside.measure import Outcome, Settings, measure_subject
from runner.inside.subjects.base import configure_compile_cache

log = logging.getLogger("fe_ci.inside.determinism")
# how long a timed comparison waits for the processes compiling ahead to end (``ahead.quiet``)
QUIET_WAIT_S = 30.0


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


def _measure(
    name: str,
    device: torch.device,
    settings: Settings,
    start: Mapping[str, Any],
    pin: str | None,
    compare_at: dict[str, Any] | None,
) -> tuple[Outcome, float]:
    """One GPU subject's verdict (its comparison left in ``Outcome.compare``), and the seconds its
    module (the frontend with it) took to load."""
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
        compare_at=compare_at,
        log=log.info,
        defer=True,
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
    subjects), ``compile_only_wait_s`` (waiting, after them, for the background compile-only
    runs), ``ahead_processes`` and ``ahead_wait_s`` (the processes compiling ahead, and how long
    the timed comparisons waited for them to end); ``timings[<subject>]`` each GPU subject's
    phases or a compile-only subject's wall time.
    """
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    entered = time.perf_counter()
    cache = configure_compile_cache(
        params.get("compile_cache_dir"), params.get("compile_cache_key")
    )
    settings = plan.settings(params)
    names = [n for n in SUBJECTS if n in (params.get("subjects") or SUBJECTS)]
    early = _compile_ahead(names, params, cache.get("dir"))  # before anything touches CUDA
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
    environment = plan.environment(device)
    environment_s = time.perf_counter() - t0
    stage_t: dict[str, Any] = {
        "ready_s": _ready_s(params),
        "cuda_init_s": round(cuda_init_s, 3),
        "environment_s": round(environment_s, 3),
    }
    starts = plan.start_configs(params, family, environment)
    points = plan.comparison_points(params, family)
    pin = params.get("pin_config")
    backend = environment.get("cudnn_backend")
    status_of = {name: plan.status_of(name, caps, device, family, pin, backend) for name in names}
    # the compile-only runs need no GPU: started now, they overlap each other and the GPU subjects.
    # Their results are kept under the kernel sources' key where the runner gave one: what they
    # compile is those sources (the runner publishes them there only for a trusted build)
    cache_dir = cache.get("dir")
    source_key = params.get("compile_cache_source_key")
    if source_key and cache_dir:
        cache["source_key"] = source_key
    cache_key = (source_key or cache.get("key")) if cache_dir else None
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
            points,
            lambda: early.quiet(QUIET_WAIT_S),
        )
    finally:
        for pending in background.values():
            pending.stop()
        processes = len(early.children)
        early_t = early.finish()
    timings = doc["timings"]
    for name, seconds in early_t.items():
        timings.setdefault(name, {}).update(seconds)
    stage_t.update(doc.pop("stage_timings"))
    stage_t["ahead_processes"] = processes
    stage_t["ahead_wait_s"] = round(early.waited_s, 3)
    stage_t["total_s"] = round(time.perf_counter() - entered, 3)
    timings["stage"] = stage_t
    status, reason = _roll_up(doc["checks"], "determinism")
    num_status, num_reason = _roll_up(doc["numerics"], "numerics")
    if device is None and status not in ("error", "fail"):  # a bad --config still says so
        status, reason = "skipped", "no CUDA GPU on this host"
        num_status, num_reason = "skipped", reason
    out: DeterminismDoc = {
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
        "comparison_points": points,
        "environment": environment,
    }
    if (rows := _frontend_rows(params)) is not None:
        out["frontend_refusal"] = rows
    return out


def _frontend_rows(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The refusal stage's document of a job whose consumer rows are the CPU job's, where the
    runner asks for it here (``frontend_refusal``): the frontend's own rows
    (``refusal.frontend_only``), made after the subjects in this process, which has torch, the
    frontend and the GPU up already. None when not asked."""
    ask = params.get("frontend_refusal")
    if not isinstance(ask, Mapping):
        return None
    t0 = time.perf_counter()
    try:
        from runner.inside import refusal  # only when asked: it imports the consumer

        doc: dict[str, Any] = dict(refusal.frontend_only({"family": ask.get("family")}))
    except Exception as exc:  # the candidate's failure is the refusal stage's error
        doc = {
            "status": "error",
            "reason": f"the frontend refusal rows: {type(exc).__name__}: {exc}"[:2000],
            "log_tail": traceback.format_exc()[-4000:],
        }
    rows_s = round(time.perf_counter() - t0, 3)
    doc["timings"] = {"stage": {"rows_s": rows_s, "in_determinism_process": True}}
    return doc


def _compile_ahead(
    names: list[str], params: Mapping[str, Any], cache_dir: str | None
) -> ahead.Ahead:
    """The processes compiling ahead (``ahead.py``): for a GPU job (the runner names its family)
    whose probe found the subject and its knob, where the subject runs on that family."""
    family, caps = params.get("family"), params.get("capabilities") or {}
    if not isinstance(family, str) or not params.get("compile_ahead", True):
        return ahead.Ahead()
    cuda = torch.device("cuda")  # a name only: nothing is initialised
    pin = params.get("pin_config")
    runs = [
        n for n in names if n in caps and plan.status_of(n, caps, cuda, family, pin) == ("", "")
    ]
    at = {n: p["config"] for n, p in plan.comparison_points(params, family).items()}
    return ahead.start(((n, SUBJECTS[n].load()) for n in runs), cache_dir, "cuda", at)


# Below this share of the GPU's memory free, the comparisons still to time run before the next
# subject's verdict: each holds the workload it measures (``Outcome.compare``)
MIN_FREE_SHARE = 0.5


def _memory_short(device: torch.device) -> bool:
    """Whether less than ``MIN_FREE_SHARE`` of ``device``'s memory is free (never on a CPU)."""
    if device.type != "cuda":
        return False
    free, total = torch.cuda.mem_get_info(device)
    return free < MIN_FREE_SHARE * total


def _compare(
    measured: Mapping[str, tuple[Outcome, float]], quiet: Callable[[], None] | None
) -> None:
    """Time the comparisons not yet timed, in order, after ``quiet`` ends what runs beside them;
    each one's workload is freed with it."""
    pending = [o.compare for o, _ in measured.values() if o.compare is not None]
    if pending and quiet is not None:
        quiet()
    for compare in pending:
        try:
            compare()
        finally:
            torch.cuda.empty_cache()


def _run_subjects(
    names: list[str],
    status_of: Mapping[str, tuple[str, str]],
    device: torch.device | None,
    settings: Settings,
    starts: Mapping[str, Mapping[str, Any]],
    background: Mapping[str, compileonly.Pending],
    cache: tuple[str | None, str | None],
    where: tuple[str | None, dict[str, Any], str | None],
    points: Mapping[str, dict[str, Any]],
    quiet: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Every subject in order: the GPU ones' verdicts measured here, then their timed comparisons
    (``quiet`` first: nothing runs beside them), the compile-only ones collected last.

    ``cache`` is the compile cache's (dir, key); ``where`` the (family, environment, pinned config)
    that a check's comparable key and a repro line's ``--config`` come from; ``points`` each
    subject's comparison point (``plan.comparison_points``).
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
    measured: dict[str, tuple[Outcome, float]] = {}  # each GPU subject's verdict, in order
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
        if _memory_short(device):  # the held workloads go before this subject needs the room
            _compare(measured, quiet)
        try:
            outcome, import_s = _measure(
                name, device, settings, starts.get(name) or {}, pin, points.get(name)
            )
        except Exception as exc:  # one subject's crash must not hide the others' results
            log.exception("subject=%s error", name)
            reason = f"{type(exc).__name__}: {exc}"[:2000]
            checks.append(_check(f"{name}.deterministic", "error", reason))
            numerics += [_check(f"{name}.{out}", "error", reason) for out in subject.outputs]
            continue
        finally:
            if device is not None:
                torch.cuda.empty_cache()
        checks.append(outcome.check)
        numerics += outcome.numerics
        drift += outcome.drift
        if outcome.config:
            chosen[name] = outcome.config
        measured[name] = (outcome, import_s)
    # the timed comparisons come after every verdict, with nothing beside them: the processes
    # compiling ahead have had all the verdicts' time to end (``ahead.quiet``)
    _compare(measured, quiet)
    for name, (outcome, import_s) in measured.items():
        compared = outcome.check["metrics"]["comparison"]
        compared["comparable"] = bits.comparable(
            name,
            compared["config_name"],
            family,
            environment,
            bits.inputs_id(importlib.import_module(SUBJECTS[name].module_name).__file__),
        )
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
        compileonly.attach(name, doc, skipped_checks[name], checks, findings)
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
    from runner.inside._io import main

    main(run)
