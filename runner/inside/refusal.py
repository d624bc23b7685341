"""The refusal stage: drive the reference consumer through every row of the consumer's contract.

``python -m runner.inside.refusal --in PARAMS.json --out RESULT.json`` in the candidate's
environment. Params (all optional): ``family`` (the GPU family of this job, e.g. ``"sm_100"``).
The probe's capabilities the runner passes along are not used: the suite feature-detects the
wrappers itself, as the contract asks of every consumer.

Rows: activation x request x scale bias x FC1 bias x unit scale (80). ``expected`` comes from the
contract and what this build's wrappers offer (``refusal_rows``); ``observed`` from running the
consumer, with the wrapper's call intercepted (``interception``: the grouped-GEMM kernels need an
sm_100 GPU), so the decision and the exact keyword arguments are seen. The torch flag is set with
``warn_only=True`` and, with the environment variable, restored after every row.

Where TransformerEngine is importable, its grouped-MLP gate (``te_gate``) is asked the same rows
and each row where it departs from the contract becomes a ``consumer_gap`` finding.

On an sm_100 GPU the ``deterministic`` rows belong to the determinism harness: ``run`` takes it as
its ``determinism`` argument. The module's entry point passes none, and on an sm_100 job says so in
a ``skipped`` check, so such a job cannot read as covered.

With ``scope`` ``"frontend"`` (a GPU job whose consumer rows are the CPU job's decisions, reused:
the lease says so) only the frontend's own rows run (``frontend_only``); the runner has the
determinism stage's process run them (``determinism._frontend_rows``) where that stage runs, and
starts this module for them only where it did not.

Output (``core.wire.results.StageResult`` keys): ``status``, ``reason``, ``checks`` (one
``<subject>.refusal`` per activation, ``refusal.state_restored``, ``refusal.te_gate``, and
``refusal.determinism_harness`` on sm_100, and ``frontend_refusal.<row>`` per refusal the
frontend itself owes: ``frontend_refusal``), ``findings`` (``consumer_gap``), ``refusal`` (rows:
the ``RefusalRow`` fields plus ``state``, the request as the row saw it, and ``te`` where
TransformerEngine was asked); and ``knobs``: per subject what the consumer detected.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import Any

import torch

from core.frontend_refusals import FRONTEND_ONLY, REUSED_CHECK
from core.subjects import HARNESS_REFUSAL_FAMILIES, family_of
from runner.inside import consumer, frontend_refusal
from runner.inside._io import main
from runner.inside.documents import CheckDoc, FindingDoc, RefusalDoc, RefusalRowDoc
from runner.inside.interception import observe
from runner.inside.refusal_rows import (
    ACTIVATIONS,
    SUBJECT_OF,
    Row,
    all_rows,
    expected_outcome,
    request_state,
    restore,
    torch_state,
)
from runner.inside.te_gate import consumer_gaps, load_te_gate, te_decision

# On an sm_100 GPU, runs a ``deterministic`` row's step for real under the row's request and
# returns {"status": "pass" | "fail" | "inconclusive", "detail": str}. Supplied by the
# determinism harness; None decides those rows by interception alone.
DeterminismHarness = Callable[[consumer.StepConfig], Mapping[str, Any]]


def run(params: dict[str, Any], determinism: DeterminismHarness | None = None) -> RefusalDoc:
    """The refusal stage; ``determinism`` is the hook for the sm_100 harness (see module doc)."""
    if params.get("scope") == FRONTEND_ONLY:
        return frontend_only(params)
    supports = {a: consumer.knob_support(a) for a in ACTIVATIONS}
    runnable = tuple(a for a in ACTIVATIONS if supports[a].importable)
    checks: list[CheckDoc] = []
    for a in ACTIVATIONS:
        if a not in runnable:
            checks.append(
                {
                    "name": f"{SUBJECT_OF[a]}.refusal",
                    "status": "not_applicable",
                    "detail": f"{consumer.WRAPPERS[a].name} is not in this build: "
                    f"{supports[a].error}",
                }
            )
    te_gate, te_reason = load_te_gate()
    baseline = torch_state()
    rows: list[RefusalRowDoc] = []
    leaks: list[str] = []
    for row in all_rows(runnable):
        seen = observe(row)
        expected = expected_outcome(row, supports[row.activation])
        status = "pass" if seen["observed"] == expected else "fail"
        detail = seen["detail"]
        if determinism is not None and seen["observed"] == "deterministic":
            with request_state(row.request):
                verdict = determinism(row.step)
            if status == "pass":
                status = str(verdict["status"])
            detail = f"{detail}; determinism: {verdict.get('detail', '')}"
        record: RefusalRowDoc = {
            "activation": row.activation,
            "request": row.request,
            "scale_bias": row.scale_bias,
            "fc1_bias": row.fc1_bias,
            "unit_scale": row.unit_scale,
            "expected": expected,
            "observed": seen["observed"],
            "status": status,
            "detail": detail,
            "kwargs": seen["kwargs"],
            "call_kwargs": seen["kwargs"],  # the report's name for it
            "state": seen["state"],
        }
        if te_gate is not None:
            record["te"] = te_decision(te_gate, row)
        rows.append(record)
        if torch_state() != baseline:
            leaks.append(row.describe())
            restore(baseline)

    for a in runnable:
        checks.append(_activation_check(a, [r for r in rows if r["activation"] == a]))
    checks.append(
        {
            "name": "refusal.state_restored",
            "status": "fail" if leaks else "pass",
            "detail": f"state leaked after: {leaks[:3]}"
            if leaks
            else (f"{consumer.ENV_VAR} and the torch flag restored after every row"),
        }
    )
    checks.append(
        {
            "name": "refusal.te_gate",
            "status": "pass" if te_gate is not None else "not_applicable",
            "detail": te_reason,
        }
    )
    reason_extra = ""
    if params.get("family") in HARNESS_REFUSAL_FAMILIES and determinism is None:
        checks.append(
            {
                "name": "refusal.determinism_harness",
                "status": "skipped",
                "detail": "the deterministic rows were decided by interception; the "
                "determinism harness is not connected to this stage",
            }
        )
        reason_extra = "; deterministic rows not run through the determinism harness"
    own = frontend_refusal.checks(*_host(params))
    checks += own
    reason_extra += "; frontend refusals: " + ", ".join(
        f"{n} {st}" for st, n in sorted(Counter(c["status"] for c in own).items())
    )
    findings = consumer_gaps(rows)
    return _result(rows, checks, findings, supports, runnable, reason_extra)


def frontend_only(params: Mapping[str, Any]) -> RefusalDoc:
    """Only the frontend's own refusal rows (a GPU job whose consumer rows are the CPU job's
    decisions, reused): those rows' checks, and ``refusal.reused_decisions`` saying the consumer's
    rows were not made here (the service fills in whose they are and how they ended)."""
    own = frontend_refusal.checks(*_host(params))
    counts = ", ".join(f"{n} {st}" for st, n in sorted(Counter(c["status"] for c in own).items()))
    reused: CheckDoc = {
        "name": REUSED_CHECK,
        "status": "not_applicable",
        "detail": "the consumer's rows were not run here: this job reuses the cpu job's decisions",
    }
    ran = [c for c in own if c["status"] not in ("skipped", "not_applicable")]
    return {
        "status": _worst(c["status"] for c in ran) if ran else "not_applicable",
        "reason": f"frontend refusal rows only ({counts}); the consumer's rows are reused",
        "checks": [*own, reused],
        "findings": [],
        "refusal": [],
        "knobs": {},
    }


def _host(params: Mapping[str, Any]) -> tuple[torch.device | None, str | None, str | None]:
    """This host's GPU (None without one), its family and its cuDNN backend, for the frontend's
    own refusals."""
    if not torch.cuda.is_available():
        return None, params.get("family"), None
    device = torch.device("cuda", torch.cuda.current_device())
    family = params.get("family") or family_of(*torch.cuda.get_device_capability(device))
    try:
        import cudnn

        backend: str | None = str(cudnn.backend_version_string())
    except Exception:  # unreadable: the rows run, and the call says what the library lacks
        backend = None
    return device, family, backend


def _activation_check(activation: str, rows: list[RefusalRowDoc]) -> CheckDoc:
    wrong = [r for r in rows if r["status"] != "pass"]
    detail = f"{len(rows) - len(wrong)} of {len(rows)} rows as the contract expects"
    if wrong:
        shown = [
            f"{Row.of(r).describe()}: expected {r['expected']}, observed {r['observed']}"
            for r in wrong[:5]
        ]
        detail += "; " + "; ".join(shown)
    return {
        "name": f"{SUBJECT_OF[activation]}.refusal",
        "status": _worst(r["status"] for r in rows),
        "detail": detail,
        "metrics": {
            "rows": len(rows),
            "as_expected": len(rows) - len(wrong),
            "expected": dict(Counter(r["expected"] for r in rows)),
            "observed": dict(Counter(r["observed"] for r in rows)),
            "passed_false": sum(r["observed"] == "passed_false" for r in rows),
        },
    }


def _result(
    rows: list[RefusalRowDoc],
    checks: list[CheckDoc],
    findings: list[FindingDoc],
    supports: Mapping[str, consumer.KnobSupport],
    runnable: tuple[str, ...],
    reason_extra: str,
) -> RefusalDoc:
    knobs = {SUBJECT_OF[a]: asdict(s) for a, s in supports.items()}
    ran = [c for c in checks if c["status"] not in ("skipped", "not_applicable")]
    if not runnable and not ran:
        status, reason = (
            "not_applicable",
            "neither grouped-GEMM dactivation wrapper is in this build",
        )
    elif not runnable:
        status = _worst(c["status"] for c in checks)
        reason = "neither grouped-GEMM dactivation wrapper is in this build"
    else:
        status = _worst(c["status"] for c in checks)
        off = sum(r["status"] != "pass" for r in rows)
        failed = [c["name"] for c in checks if c["status"] in ("fail", "inconclusive")]
        reason = f"{len(rows) - off} of {len(rows)} rows as the contract expects"
        if failed:
            reason += f"; not passed: {', '.join(failed)}"
    return {
        "status": status,
        "reason": reason + reason_extra,
        "checks": checks,
        "findings": findings,
        "refusal": rows,
        "knobs": knobs,
    }


def _worst(statuses: Iterable[str]) -> str:
    """fail over error over inconclusive over pass; skipped and not_applicable do not count."""
    seen = set(statuses)
    return next((s for s in ("fail", "error", "inconclusive") if s in seen), "pass")


if __name__ == "__main__":
    main(run)
