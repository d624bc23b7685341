"""The gate (required checks) and the cause list: one rule in core, over build reports.

The reports are what the service and ``fe-ci validate`` judge; an H200 fleet's build (a CPU job,
an sm_90 job, no sm_100 runner) is the case the gate exists for.
"""

from __future__ import annotations

import pytest

from core import gate
from core.verdict import REASON_CHARS, causes, judge
from core.wire import (
    BuildReport,
    Conclusion,
    Finding,
    JobKind,
    JobReport,
    JobState,
    Severity,
    Stage,
    Status,
    Verdict,
)
from tests.reports import cap, chk, cpu_job, h200_build, sm90_job, st


def conclusion(report: BuildReport, require: str) -> tuple[Conclusion, str]:
    decided = gate.decide(report, gate.parse_require(require))
    return decided.conclusion, decided.reason


def test_the_vocabulary_is_stages_families_subjects_and_all() -> None:
    assert gate.parse_require(" probe, refusal,sm_90,probe") == ["probe", "refusal", "sm_90"]
    assert gate.parse_require("") == gate.parse_require(None) == ["all"]
    assert gate.parse_require("all,probe") == ["all"]
    assert gate.parse_require(["sdpa_bwd", "build"]) == ["sdpa_bwd", "build"]
    with pytest.raises(ValueError) as err:
        gate.parse_require("probe,warp,sm_120")
    message = str(err.value)
    assert "warp, sm_120" in message
    for name in ("all", "probe", "determinism", "sm_100", "sdpa_bwd", "grouped_gemm_dglu"):
        assert name in message


def test_an_h200_fleet_goes_green_on_what_it_requires_while_the_verdict_stays_incomplete() -> None:
    report = h200_build()
    assert report.verdict == Verdict.incomplete
    assert report.gate is not None and report.gate.conclusion == Conclusion.neutral
    assert "grouped_gemm_dglu" in report.gate.reason  # all: what did not run is named
    assert conclusion(report, "probe,refusal,sm_90")[0] == Conclusion.success
    assert conclusion(report, "sdpa_bwd,flex_attention_bwd,install")[0] == Conclusion.success
    # what did not run keeps a requirement neutral, and says why
    for require in ("sm_100", "determinism", "grouped_gemm_dsrelu", "probe,sm_100"):
        got, why = conclusion(report, require)
        assert got == Conclusion.neutral, (require, why)
    assert "no sm_100 runner" in conclusion(report, "sm_100")[1]
    assert "grouped_gemm_dsrelu" in conclusion(report, "determinism")[1]


def test_a_required_failure_fails_the_gate_and_one_not_required_does_not() -> None:
    report = h200_build(cpu_job(), sm90_job(Status.fail, "dq differed in 3 of 23 runs"))
    assert report.verdict == Verdict.fail
    got, why = conclusion(report, "probe,refusal,sm_90")
    assert got == Conclusion.failure and "sm_90" in why and "sdpa_bwd.deterministic" in why
    assert conclusion(report, "sdpa_bwd")[0] == Conclusion.failure
    assert conclusion(report, "flex_attention_bwd")[0] == Conclusion.success
    assert conclusion(report, "probe,refusal")[0] == Conclusion.success  # the user's choice
    assert report.gate is not None and report.gate.conclusion == Conclusion.failure


def test_failure_beats_pending_and_pending_beats_neutral() -> None:
    report = h200_build(cpu_job(), sm90_job(Status.fail))
    assert conclusion(report, "sm_100,sm_90")[0] == Conclusion.failure
    running = h200_build(cpu_job(), sm90_job(state=JobState.leased))
    assert running.verdict == Verdict.pending
    assert conclusion(running, "sm_90")[0] == Conclusion.pending
    assert conclusion(running, "probe")[0] == Conclusion.pending  # the sm_90 job runs a probe
    assert conclusion(running, "sm_90,sm_100")[0] == Conclusion.pending
    assert running.gate is not None and running.gate.conclusion == Conclusion.pending


def test_a_family_that_finished_decides_while_another_family_still_waits() -> None:
    queued = JobReport(id=3, kind=JobKind.gpu, family="sm_100", status=JobState.queued)
    report = h200_build(cpu_job(), sm90_job(), queued)
    assert report.verdict == Verdict.pending
    assert conclusion(report, "sm_90")[0] == Conclusion.success
    assert conclusion(report, "sm_100")[0] == Conclusion.pending


def test_an_error_finding_fails_the_stage_it_comes_from() -> None:
    lie = Finding(
        kind="version_feature_mismatch",
        severity=Severity.error,
        subject="grouped_gemm_dsrelu",
        message="reports 1.28.0 but the wrapper has no 'deterministic'",
    )
    report = h200_build(findings=[lie])
    assert report.verdict == Verdict.fail
    assert conclusion(report, "probe")[0] == Conclusion.failure
    assert conclusion(report, "grouped_gemm_dsrelu")[0] == Conclusion.failure
    assert conclusion(report, "refusal,sm_90,sdpa_bwd")[0] == Conclusion.success


def test_inconclusive_fails_a_gate_that_requires_it() -> None:
    report = h200_build(cpu_job(), sm90_job(Status.inconclusive, "the control never varied"))
    assert report.verdict == Verdict.inconclusive
    got, why = conclusion(report, "sm_90")
    assert got == Conclusion.failure and "control never varied" in why


def test_a_subject_this_build_lacks_passes_and_a_wheel_needs_no_build() -> None:
    report = h200_build()
    report.capabilities["flex_attention_bwd"] = cap(present=False)
    assert conclusion(report, "flex_attention_bwd")[0] == Conclusion.success
    assert conclusion(report, "build")[0] == Conclusion.success
    report.source = "release"  # a release from the package index comes with its wheel too
    assert conclusion(report, "build")[0] == Conclusion.success
    report.source = "commit"
    assert conclusion(report, "build")[0] == Conclusion.neutral  # no builder job ran it


def test_a_cpu_only_run_passes_probe_and_refusal_and_is_neutral_on_everything() -> None:
    local = JobReport(
        kind=JobKind.cpu,
        status=JobState.finished,
        stages=[
            st(Stage.install),
            st(Stage.probe),
            st(Stage.determinism, Status.skipped, reason="excluded by --stages"),
            st(Stage.numerics, Status.skipped, reason="excluded by --stages"),
            st(Stage.refusal),
        ],
    )
    report = h200_build(local)
    assert report.verdict == Verdict.incomplete
    assert conclusion(report, "probe,refusal")[0] == Conclusion.success
    assert report.gate is not None and report.gate.conclusion == Conclusion.neutral
    # not-run reasons name the real cause, not a missing runner
    assert {n.reason for n in report.not_run} == {"excluded by --stages"}
    assert "excluded by --stages" in report.verdict_reason


def test_every_cause_is_listed_and_the_reason_is_a_short_summary() -> None:
    long_detail = "compile-only: " + "the kernel compiled for sm_100a with options " * 16
    error_finding = Finding(kind="feature_regression", severity=Severity.error, message="lost")
    sm90 = sm90_job(Status.fail, long_detail)
    sm90.stages[3] = st(Stage.numerics, Status.fail, chk("sdpa_bwd.dq", Status.fail, "off by 1"))
    crashed = st(Stage.refusal, Status.crashed, reason="killed by SIGSEGV")
    report = h200_build(cpu_job(crashed), sm90, findings=[error_finding])
    found = causes(report)
    assert [(c.kind, c.name, c.status) for c in found] == [
        ("check", "sdpa_bwd.deterministic", "fail"),
        ("check", "sdpa_bwd.dq", "fail"),
        ("finding", "feature_regression", "fail"),
        ("stage", "refusal", "crashed"),
    ]
    assert found[0].family == "sm_90" and found[0].job_id == 2
    assert found[0].repro and "--subjects sdpa_bwd" in found[0].repro
    assert len(found[0].reason) <= 200 and found[0].reason.endswith("…")
    assert report.causes == found
    assert report.verdict == Verdict.fail
    assert len(report.verdict_reason) <= REASON_CHARS
    for c in found:  # all named, not only the first
        assert c.name in report.verdict_reason


def test_one_cause_reads_as_its_name_and_its_reason() -> None:
    report = h200_build(cpu_job(), sm90_job(Status.fail, "dq differed from run 0 in 3 runs"))
    assert judge(report).reason == "sdpa_bwd.deterministic: dq differed from run 0 in 3 runs"
    assert [c.name for c in report.causes] == ["sdpa_bwd.deterministic"]
    assert h200_build().causes == []  # incomplete: what did not run is not_run, not a cause
