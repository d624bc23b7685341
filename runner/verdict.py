"""The verdict of a build: one rule, in the order of DESIGN.md's table.

Used by the service (over the stored report) and by ``fe-ci validate`` (over a local one), so the
two can never disagree. ``not_applicable`` never lowers the verdict. Subjects are judged across
jobs: a subject the build has that no job covered counts as skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.inside.registry import SUBJECTS
from runner.wire import (
    BuildReport,
    JobReport,
    JobState,
    Severity,
    Stage,
    StageResult,
    Status,
    Verdict,
)

_ERRORS = (Status.error, Status.timeout, Status.crashed)
_COVERED = (Status.pass_, Status.fail, Status.inconclusive, Status.error, Status.timeout)


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reason: str


def _stages(jobs: list[JobReport]) -> list[tuple[JobReport, StageResult]]:
    return [(job, stage) for job in jobs for stage in job.stages]


def uncovered_subjects(report: BuildReport) -> dict[str, str]:
    """Subjects whose knob this build has but no job's determinism stage exercised, with why."""
    present = [name for name, cap in report.capabilities.items() if cap.importable and cap.present]
    covered: set[str] = set()
    skip_reasons: dict[str, str] = {}
    for _job, stage in _stages(report.jobs):
        if stage.name != Stage.determinism:
            continue
        for check in stage.checks:
            subject = check.name.split(".", 1)[0]
            if check.status in _COVERED or check.status == Status.not_applicable:
                covered.add(subject)
            elif check.status == Status.skipped:
                skip_reasons.setdefault(subject, check.detail)
    out: dict[str, str] = {}
    for name in present:
        if name in covered:
            continue
        families = SUBJECTS[name].families if name in SUBJECTS else ()
        reason = skip_reasons.get(name) or (
            f"skipped: no {' or '.join(families) or 'GPU'} runner" if families else "skipped"
        )
        out[name] = reason
    return out


def judge(report: BuildReport) -> Judgement:
    jobs = report.jobs
    pending = [j for j in jobs if j.status in (JobState.waiting, JobState.queued, JobState.leased)]
    if pending and report.status != "cancelled":
        return Judgement(Verdict.pending, f"{len(pending)} job(s) not finished")
    if report.status == "cancelled":
        return Judgement(Verdict.cancelled, "the build was cancelled")

    stages = _stages(jobs)
    for _job, stage in stages:
        if stage.status == Status.fail:
            return Judgement(Verdict.fail, f"{stage.name}: {stage.reason or 'failed'}")
        for check in stage.checks:
            if check.status == Status.fail:
                return Judgement(Verdict.fail, f"{check.name}: {check.detail or 'failed'}")
    for finding in report.findings:
        if finding.severity == Severity.error:
            return Judgement(Verdict.fail, f"{finding.kind}: {finding.message}")

    for _job, stage in stages:
        if stage.status in _ERRORS:
            return Judgement(Verdict.error, f"{stage.name} {stage.status}: {stage.reason}")
    for job in jobs:
        if job.status == JobState.finished and job.reason.startswith("error"):
            return Judgement(Verdict.error, f"{job.kind} job: {job.reason}")

    for _job, stage in stages:
        if stage.name != Stage.determinism:
            continue
        if stage.status == Status.inconclusive:
            return Judgement(Verdict.inconclusive, f"determinism: {stage.reason}")
        for check in stage.checks:
            if check.status == Status.inconclusive:
                return Judgement(Verdict.inconclusive, f"{check.name}: {check.detail}")

    for _job, stage in stages:
        if stage.status == Status.skipped:
            return Judgement(Verdict.incomplete, f"{stage.name} skipped: {stage.reason}")
    for job in jobs:
        if job.status == JobState.finished and job.reason.startswith("skipped"):
            return Judgement(Verdict.incomplete, f"{job.family or job.kind} job {job.reason}")
    missing = uncovered_subjects(report)
    if missing:
        name, why = next(iter(sorted(missing.items())))
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return Judgement(Verdict.incomplete, f"{name}: {why}{more}")
    if not stages:
        return Judgement(Verdict.incomplete, "no stage ran")
    return Judgement(Verdict.pass_, "everything applicable ran and passed")


EXIT_CODES: dict[Verdict, int] = {
    Verdict.pass_: 0,
    Verdict.fail: 1,
    Verdict.error: 1,
    Verdict.inconclusive: 2,
    Verdict.incomplete: 2,
    Verdict.pending: 2,
    Verdict.cancelled: 2,
}
