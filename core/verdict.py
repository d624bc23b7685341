"""The verdict of a build: one rule, in the order of the table in docs/architecture.md.

Used by the service (over the stored report) and by ``fe-ci validate`` (over a local one), so the
two can never disagree. ``not_applicable`` never lowers the verdict. Subjects are judged across
jobs: a subject the build has that no job covered counts as skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.subjects import SUBJECTS
from core.wire import (
    BuildReport,
    JobReport,
    JobState,
    NotRun,
    Severity,
    Stage,
    StageResult,
    Status,
    Verdict,
)

# The one place for these sets: the grid, the build page and the JUnit XML read them from here.
ERRORED = frozenset({Status.error, Status.timeout, Status.crashed})  # ended without an answer
RAN = frozenset({Status.pass_, Status.fail, Status.inconclusive}) | ERRORED  # a check that ran


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reason: str
    not_run: list[NotRun] = field(default_factory=list)


def no_runner(families: tuple[str, ...] | list[str]) -> str:
    """The one wording for a subject or stage that no runner of its families ran: the grid's
    hover, the verdict line, the build page and the JUnit XML all say this."""
    return f"skipped: no {' or '.join(families) or 'GPU'} runner"


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
            if check.status in RAN or check.status == Status.not_applicable:
                covered.add(subject)
            elif check.status == Status.skipped:
                skip_reasons.setdefault(subject, check.detail)
    out: dict[str, str] = {}
    for name in present:
        if name in covered:
            continue
        families = SUBJECTS[name].families if name in SUBJECTS else ()
        out[name] = skip_reasons.get(name) or no_runner(families)
    return out


def not_run(report: BuildReport) -> list[NotRun]:
    """Every subject whose determinism did not run in this build, with why: those skipped (they
    could have run: the verdict is at best ``incomplete``), then those that cannot apply."""
    out = [
        NotRun(subject=name, status=Status.skipped, reason=why)
        for name, why in sorted(uncovered_subjects(report).items())
    ]
    for name, cap in sorted(report.capabilities.items()):
        if not cap.importable:
            why = f"not importable: {cap.error or 'unknown error'}"
        elif not cap.present:
            why = f"this build has no '{cap.knob}'"
        else:
            continue
        out.append(NotRun(subject=name, status=Status.not_applicable, reason=why))
    return out


def _skipped_line(missing: dict[str, str]) -> str:
    """``2 subjects did not run: a, b: skipped: no sm_100 runner; c: ...``: every one named."""
    by_reason: dict[str, list[str]] = {}
    for name, why in sorted(missing.items()):
        by_reason.setdefault(why, []).append(name)
    parts = [f"{', '.join(names)}: {why}" for why, names in by_reason.items()]
    count = f"{len(missing)} subject{'s' if len(missing) > 1 else ''}"
    return f"{count} did not run: {'; '.join(parts)}"


def judge(report: BuildReport) -> Judgement:
    """The verdict, its reason, and the subjects that did not run."""
    verdict = _verdict(report)
    missed = not_run(report)
    if verdict.verdict == Verdict.pending:  # a subject still to run has not been skipped
        missed = [n for n in missed if n.status == Status.not_applicable]
    elif verdict.verdict == Verdict.cancelled:
        missed = [
            n
            if n.status == Status.not_applicable
            else n.model_copy(update={"reason": verdict.reason})
            for n in missed
        ]
    return Judgement(verdict.verdict, verdict.reason, missed)


def _verdict(report: BuildReport) -> Judgement:
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
        if stage.status in ERRORED:
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

    missing = uncovered_subjects(report)
    if missing:  # named first: which subjects went unchecked is what a reader needs
        return Judgement(Verdict.incomplete, _skipped_line(missing))
    for _job, stage in stages:
        if stage.status == Status.skipped:
            said = stage.reason.startswith("skipped")
            why = stage.reason if said else f"skipped: {stage.reason}"
            return Judgement(Verdict.incomplete, f"{stage.name}: {why}")
    for job in jobs:
        if job.status == JobState.finished and job.reason.startswith("skipped"):
            return Judgement(Verdict.incomplete, f"{job.family or job.kind} job {job.reason}")
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
