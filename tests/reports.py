"""Build reports for the gate, cause and status tests: an H200 fleet's build (a CPU job, an
sm_90 job, no sm_100 runner), judged as the service judges it."""

from __future__ import annotations

from core import gate
from core.wire import (
    BuildReport,
    BuildStatus,
    Capability,
    Check,
    Finding,
    JobKind,
    JobReport,
    JobState,
    Stage,
    StageResult,
    Status,
    Verdict,
)

ALL_SUBJECTS = ("grouped_gemm_dsrelu", "grouped_gemm_dglu", "flex_attention_bwd", "sdpa_bwd")


def cap(present: bool = True) -> Capability:
    return Capability(importable=True, knob="deterministic", present=present)


def st(name: Stage, status: Status = Status.pass_, *checks: Check, reason: str = "") -> StageResult:
    return StageResult(name=name, status=status, reason=reason, checks=list(checks))


def chk(name: str, status: Status = Status.pass_, detail: str = "") -> Check:
    return Check(name=name, status=status, detail=detail)


def cpu_job(*extra: StageResult, state: JobState = JobState.finished) -> JobReport:
    stages = [st(Stage.install), st(Stage.probe), st(Stage.refusal), *extra]
    return JobReport(id=1, kind=JobKind.cpu, status=state, stages=stages)


def sm90_job(
    sdpa: Status = Status.pass_, detail: str = "", state: JobState = JobState.finished
) -> JobReport:
    det = [
        chk("grouped_gemm_dsrelu.deterministic", Status.skipped, "needs an sm_100 GPU"),
        chk("grouped_gemm_dglu.deterministic", Status.skipped, "needs an sm_100 GPU"),
        chk("flex_attention_bwd.deterministic"),
        chk("sdpa_bwd.deterministic", sdpa, detail),
    ]
    stages = [
        st(Stage.install),
        st(Stage.probe),
        st(Stage.determinism, sdpa if sdpa != Status.pass_ else Status.pass_, *det),
        st(Stage.numerics, Status.pass_, chk("sdpa_bwd.dq")),
        st(Stage.refusal),
    ]
    return JobReport(id=2, kind=JobKind.gpu, family="sm_90", status=state, stages=stages)


def h200_build(*jobs: JobReport, findings: list[Finding] | None = None) -> BuildReport:
    """Judged as the service judges it (``conclude``), under ``all``."""
    report = BuildReport(
        source="wheel",
        filename="nvidia_cudnn_frontend-1.32.0-py3-none-any.whl",
        status=BuildStatus.finished,
        verdict=Verdict.pending,
        capabilities={name: cap() for name in ALL_SUBJECTS},
        findings=findings or [],
        jobs=list(jobs) or [cpu_job(), sm90_job()],
    )
    if any(j.status != JobState.finished for j in report.jobs):
        report.status = BuildStatus.running
    return gate.conclude(report, [gate.ALL])
