"""The grid's subject cell and the report's ``not_run`` are one rule
(``core/verdict.py::why_uncovered``): for the same determinism checks, the cell says skipped
exactly when the report lists the subject as not run, and with the report's reason."""

from __future__ import annotations

import pytest

from core.verdict import uncovered_subjects
from core.wire import (
    BuildReport,
    BuildStatus,
    Capability,
    Check,
    JobKind,
    JobReport,
    JobState,
    Stage,
    StageResult,
    Status,
    Verdict,
)
from service.web.cells import CapView, CheckView, JobView, subject_cell

NAME = "sdpa_bwd"  # runs on sm_80, sm_90 and sm_100
CAP = Capability(importable=True, knob="deterministic", present=True, method="signature")


def _report(checks: dict[str, list[tuple[Status, str]]]) -> BuildReport:
    jobs = [
        JobReport(
            id=i, kind=JobKind.gpu, family=family, status=JobState.finished,
            stages=[StageResult(
                name=Stage.determinism, status=Status.pass_,
                checks=[Check(name=f"{NAME}.deterministic", status=s, detail=d) for s, d in said],
            )],
        )
        for i, (family, said) in enumerate(checks.items(), start=1)
    ]  # fmt: skip
    return BuildReport(
        source="wheel", status=BuildStatus.finished, verdict=Verdict.pending,
        capabilities={NAME: CAP}, jobs=jobs,
    )  # fmt: skip


def _cell_reason(report: BuildReport) -> tuple[str, str]:
    views = [
        JobView(id=j.id or 0, build_id=1, kind=j.kind, family=j.family, stages=["determinism"],
                state=j.status, outcome=None, reason="", attempt=1, runner="r")
        for j in report.jobs
    ]  # fmt: skip
    checks = [
        CheckView(job_id=j.id or 0, name=c.name, status=c.status, detail=c.detail)
        for j in report.jobs
        for s in j.stages
        for c in s.checks
    ]
    cap = CapView(NAME, importable=True, present=True, error=None, knob="deterministic")
    cell = subject_cell(NAME, cancelled=False, jobs=views, checks=checks, cap=cap, alive=set())
    return cell.state, cell.reason


@pytest.mark.parametrize(
    "checks",
    [
        # two families skipped it, each for its own reason: the report names the first
        {"sm_90": [(Status.skipped, "no sm_90 kernel in this build")],
         "sm_100": [(Status.skipped, "excluded by --subjects")]},
        {"sm_90": [(Status.skipped, "")]},
        {"sm_90": [(Status.not_applicable, "no such config here")]},
        {"sm_90": [(Status.pass_, "bit-exact")], "sm_100": [(Status.skipped, "no GPU")]},
        {},
    ],
)  # fmt: skip
def test_the_grid_says_skipped_exactly_when_and_why_the_report_does(
    checks: dict[str, list[tuple[Status, str]]],
) -> None:
    report = _report(checks)
    state, reason = _cell_reason(report)
    uncovered = uncovered_subjects(report)
    assert (state == "skipped") == (NAME in uncovered)
    if NAME in uncovered:
        assert reason == uncovered[NAME]
