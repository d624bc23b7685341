"""A build report's coverage of 1.32.0's measured surface (core/surface_ledger.json): a knob of a
frontend refusal row is refusal-only where a GPU job's refusal stage ran that row, and not
covered where an sm_90 job reused the CPU job's refusal decisions (whose rows were skipped)."""

from __future__ import annotations

import json
from pathlib import Path

from core import coverage
from core.frontend_refusals import CHECK_PREFIX
from core.wire import BuildReport, Check, JobReport, Stage, StageResult, Status
from core.wire.results import SurfaceKnob

ROOT = Path(__file__).resolve().parents[2]
KNOBS = json.loads((ROOT / "core" / "surface_ledger.json").read_text())["releases"]["1.32.0"][
    "knobs"
]
DSA = "cudnn.deepseek_sparse_attention."
ROWS = ("dsa_sparse_attention_bwd.deterministic", "dsa_indexer_bwd.deterministic")


def _job(kind: str, family: str | None, refusal: StageResult, job_id: int) -> JobReport:
    return JobReport.model_validate(
        {"id": job_id, "kind": kind, "family": family, "status": "finished",
         "stages": [refusal.model_dump()]}
    )  # fmt: skip


def _refusal(status: str, checks: list[Check], reason: str = "") -> StageResult:
    return StageResult(name=Stage.refusal, status=Status(status), reason=reason, checks=checks)


def _rows(status: str) -> list[Check]:
    return [Check(name=f"{CHECK_PREFIX}.{r}", status=Status(status)) for r in ROWS]


def _report(*jobs: JobReport) -> BuildReport:
    return BuildReport.model_validate(
        {"source": "wheel", "status": "finished", "verdict": "pass", "jobs": [j.model_dump()
         for j in jobs], "surface": [SurfaceKnob.model_validate(k).model_dump() for k in KNOBS]}
    )  # fmt: skip


def _dsa(report: BuildReport) -> dict[str, tuple[str, str]]:
    rows = coverage.of_report(report).rows
    return {
        r.entry_point.removeprefix(DSA): (r.status, r.why)
        for r in rows
        if r.entry_point.startswith(DSA) and r.knob == "deterministic"
        and r.entry_point.endswith("_backward_wrapper")
    }  # fmt: skip


def test_an_sm_90_job_that_ran_the_rows_makes_the_dsa_knobs_refusal_only() -> None:
    cpu = _job("cpu", None, _refusal("pass", _rows("skipped")), 1)
    gpu = _job("gpu", "sm_90", _refusal("pass", _rows("pass")), 2)
    seen = _dsa(_report(cpu, gpu))
    assert set(seen) == {"sparse_attention_backward_wrapper", "indexer_backward_wrapper"}
    for status, why in seen.values():
        assert status == "refusal_only" and "checked on sm_90" in why
    assert coverage.refused_of(_report(cpu, gpu)) == {r: {"sm_90"} for r in ROWS}


def test_an_sm_90_job_that_reused_the_cpu_decisions_leaves_them_not_covered() -> None:
    cpu = _job("cpu", None, _refusal("pass", _rows("skipped")), 1)
    reused = _refusal("not_applicable", [], "reused from the cpu job (job 1)")
    gpu = _job("gpu", "sm_90", reused, 2)
    seen = _dsa(_report(cpu, gpu))
    assert seen and all(
        status == "not_covered" and "would be refusal-only" in why for status, why in seen.values()
    )
    assert coverage.refused_of(_report(cpu, gpu)) == {}


def test_a_knob_with_an_sm_100_subject_and_an_sm_90_refusal_reads_refusal_only_on_sm_90() -> None:
    """DSA sparse attention backward is a subject on sm_100 and a refusal row on sm_90: an sm_90
    fleet that ran the row covers it refusal-only, saying where the subject would run; a fleet
    that compiled the subject for sm_100a reads compile-only."""
    cpu = _job("cpu", None, _refusal("pass", _rows("skipped")), 1)
    gpu = _job("gpu", "sm_90", _refusal("pass", _rows("pass")), 2)
    status, why = _dsa(_report(cpu, gpu))["sparse_attention_backward_wrapper"]
    assert status == "refusal_only"
    assert "checked on sm_90" in why and "dsa_sparse_attention_bwd would run it on sm_100" in why
    compiled = coverage.surface.coverage(
        [k for k in KNOBS if k["entry_point"].endswith("sparse_attention_backward_wrapper")
         and k["knob"] == "deterministic"], {}, {"dsa_sparse_attention_bwd"},
        coverage.refused_of(_report(cpu, gpu)),
    )  # fmt: skip
    assert [r["status"] for r in compiled] == ["compile_only"]
