"""The verdict of a build: one rule, in the order of the table in docs/architecture.md.

Used by the service (over the stored report) and by ``fe-ci validate`` (over a local one), so the
two can never disagree. ``not_applicable`` never lowers the verdict. Subjects are judged across
jobs: a subject the build has that no job covered counts as skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from core import notrun
from core.kinds import FindingKind
from core.subjects import SUBJECTS
from core.text import plural, shorten
from core.wire import (
    BuildReport,
    Cause,
    Check,
    JobKind,
    JobOutcome,
    JobReport,
    JobState,
    NotRun,
    Severity,
    Stage,
    StageResult,
    Status,
    Verdict,
)

# The one place for these sets and this order: the gate, the repro lines, bisection, remembered
# configs, the grid, the build page, the JUnit XML and the GitHub statuses read them from here.
ERRORED = frozenset({Status.error, Status.timeout, Status.crashed})  # ended without an answer
ANSWERED = frozenset({Status.pass_, Status.fail, Status.inconclusive})  # ran and answered
RAN = ANSWERED | ERRORED  # a check that ran
NOT_PASSED = RAN - {Status.pass_}  # ran and did not pass: each gets a repro line
NO_ANSWER = ERRORED | {Status.skipped}  # could have said, and did not
NOT_RUN = frozenset({Status.skipped, Status.not_applicable})  # could have run, or cannot apply
ENDED_WELL = frozenset({Status.pass_, Status.not_applicable})  # lowers no verdict
# Worst first: the status that stands for several (a stage's checks, a subject's jobs).
WORST_FIRST = (
    Status.fail,
    Status.crashed,
    Status.timeout,
    Status.error,
    Status.inconclusive,
    Status.skipped,
    Status.pass_,
    Status.not_applicable,
)
OPEN_JOBS = frozenset({JobState.waiting, JobState.queued, JobState.leased})  # not ended yet
REASON_CHARS = 240  # the verdict's reason: a summary; the cause list says the rest
CAUSE_CHARS = 200  # one cause's reason, on one line
# The stage a finding comes from, by kind; any other kind is the probe's (its ledger, its
# comparison with the line's previous build). The grid colours that stage's cell by it.
FINDING_STAGES: dict[str, Stage] = {
    FindingKind.consumer_gap: Stage.refusal,
    FindingKind.compile_only_unavailable: Stage.determinism,
    FindingKind.deterministic_bits_changed: Stage.determinism,
    FindingKind.determinism_cost_regressed: Stage.determinism,
    FindingKind.comparison_point_changed: Stage.determinism,
}


def finding_stage(kind: str) -> Stage:
    return FINDING_STAGES.get(kind, Stage.probe)


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


class _Said(Protocol):
    @property
    def status(self) -> str: ...
    @property
    def detail(self) -> str: ...


def why_uncovered(
    name: str, checks: Iterable[_Said], stage_reasons: Iterable[str] = ()
) -> str | None:
    """The one coverage rule for a subject whose knob the build has, given its determinism
    checks across the build's jobs and why a determinism stage that could have run it was
    skipped whole: None when a check ran or could not apply (covered); else why not, its first
    skipped check's detail, else the first such stage's reason, else that no runner of its
    families ran it. The report (``uncovered_subjects``) and the grid's subject cell
    (``service/web/cells.py``) both ask this."""
    checks = list(checks)
    if any(c.status in RAN or c.status == Status.not_applicable for c in checks):
        return None
    skipped = next((c.detail for c in checks if c.status == Status.skipped), None)
    return skipped or next(iter(stage_reasons), None) or no_runner(_families(name))


def uncovered_subjects(report: BuildReport) -> dict[str, str]:
    """Subjects whose knob this build has but no job's determinism stage exercised, with why."""
    present = [name for name, cap in report.capabilities.items() if cap.importable and cap.present]
    checks: dict[str, list[Check]] = {}
    stage_reasons: dict[str, list[str]] = {}  # a whole stage skipped: why ("excluded by --stages")
    for job, stage in _stages(report.jobs):
        if stage.name != Stage.determinism:
            continue
        if stage.status == Status.skipped and stage.reason:
            for name in present:
                if job.family is None or job.family in _families(name):
                    stage_reasons.setdefault(name, []).append(stage.reason)
        for check in stage.checks:
            checks.setdefault(check.subject, []).append(check)
    out: dict[str, str] = {}
    for name in present:
        why = why_uncovered(name, checks.get(name, ()), stage_reasons.get(name, ()))
        if why is not None:
            out[name] = why
    return out


def _families(name: str) -> tuple[str, ...]:
    return SUBJECTS[name].families if name in SUBJECTS else ()


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


def judge(report: BuildReport) -> Judgement:
    """The verdict, its reason, and the subjects that did not run.

    Where checks, stages, findings or jobs hold the verdict below ``pass``, the reason is a short
    summary of all of them (``causes`` lists each); never only the first.
    """
    verdict = _verdict(report)
    if verdict.verdict in (Verdict.fail, Verdict.error, Verdict.inconclusive):
        verdict = Judgement(verdict.verdict, summary(causes(report)) or verdict.reason)
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
    pending = [j for j in jobs if j.status in OPEN_JOBS]
    if pending and report.status != "cancelled":
        return Judgement(Verdict.pending, f"{plural(len(pending), 'job')} not finished")
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
        if job.outcome == JobOutcome.error:
            return Judgement(Verdict.error, f"{job.kind} job: {job.reason}")

    for _job, stage in stages:
        if stage.name != Stage.determinism:
            continue
        if stage.status == Status.inconclusive:
            return Judgement(Verdict.inconclusive, f"determinism: {stage.reason}")
        for check in stage.checks:
            if check.status == Status.inconclusive:
                return Judgement(Verdict.inconclusive, f"{check.name}: {check.detail}")

    if uncovered_subjects(report):  # named first: which subjects went unchecked, and with them
        # the ones that cannot apply, in the same words as everywhere (core/notrun.py)
        return Judgement(Verdict.incomplete, notrun.summary(not_run(report)))
    for _job, stage in stages:
        if stage.status == Status.skipped:
            said = stage.reason.startswith("skipped")
            why = stage.reason if said else f"skipped: {stage.reason}"
            return Judgement(Verdict.incomplete, f"{stage.name}: {why}")
    for job in jobs:
        if job.outcome == JobOutcome.skipped:
            return Judgement(Verdict.incomplete, f"{job.cell_name or job.kind} job {job.reason}")
    if not stages:
        return Judgement(Verdict.incomplete, "no stage ran")
    return Judgement(Verdict.pass_, "everything applicable ran and passed")


def judge_job(report: BuildReport, job: JobReport) -> Judgement:
    """The verdict rule on one job: its stages, its family's subjects, the probe's errors (on
    the CPU job). GitHub's per-job contexts and a family's requirement in the gate read it."""
    caps = {
        name: cap
        for name, cap in report.capabilities.items()
        if job.kind == JobKind.gpu and job.family in _families(name)
    }
    errors = [f for f in report.findings if f.severity == Severity.error]
    alone = report.model_copy(
        update={
            "jobs": [job],
            "capabilities": caps,
            "findings": errors if job.kind == JobKind.cpu else [],
        }
    )
    return judge(alone)


def _cause_reason(text: str, fallback: str) -> str:
    return shorten(text or fallback, CAUSE_CHARS)


def causes(report: BuildReport) -> list[Cause]:
    """Every check, stage, error finding and job that holds the verdict below ``pass`` (what
    did not run aside): failures first, then errors, then what certified nothing. Read the
    repro lines from the report's checks, so give it them first (``core.repro.attach``)."""
    failed: list[Cause] = []
    errored: list[Cause] = []
    unsure: list[Cause] = []
    for job, stage in _stages(report.jobs):
        where = {"stage": stage.name, "job_id": job.id, "family": job.family, "cell": job.cell}
        bad = [c for c in stage.checks if c.status in NOT_PASSED]
        for check in bad:
            if check.status == Status.inconclusive and stage.name != Stage.determinism:
                continue
            into = {Status.fail: failed, Status.inconclusive: unsure}.get(check.status, errored)
            into.append(
                Cause(
                    kind="check",
                    name=check.name,
                    status=check.status.value,
                    subject=check.subject,
                    reason=_cause_reason(check.detail, check.status.value),
                    repro=check.repro,
                    **where,
                )
            )
        said = {c.status for c in bad}
        if stage.status in (Status.fail, *ERRORED) and stage.status not in said:
            into = failed if stage.status == Status.fail else errored
            into.append(
                Cause(
                    kind="stage",
                    name=stage.name.value,
                    status=stage.status.value,
                    reason=_cause_reason(stage.reason, stage.status.value),
                    **where,
                )
            )
        elif stage.status == Status.inconclusive and stage.name == Stage.determinism and not bad:
            unsure.append(
                Cause(
                    kind="stage",
                    name=stage.name.value,
                    status=stage.status.value,
                    reason=_cause_reason(stage.reason, "inconclusive"),
                    **where,
                )
            )
    for finding in report.findings:
        if finding.severity == Severity.error:
            failed.append(
                Cause(
                    kind="finding",
                    name=finding.kind,
                    status=Status.fail.value,
                    stage=finding_stage(finding.kind),
                    subject=finding.subject,
                    reason=_cause_reason(finding.message, finding.kind),
                )
            )
    for job in report.jobs:
        if job.outcome == JobOutcome.error:
            errored.append(
                Cause(
                    kind="job",
                    name=f"{job.cell_name or job.kind.value} job",
                    status=Status.error.value,
                    job_id=job.id,
                    family=job.family,
                    cell=job.cell,
                    reason=_cause_reason(job.reason, "error"),
                )
            )
    return failed + errored + unsure


def summary(found: list[Cause]) -> str:
    """The verdict's reason from its causes: the one cause and why, or every cause named (as
    many as fit; the cause list has them all)."""
    if not found:
        return ""
    if len(found) == 1:
        c = found[0]
        return shorten(f"{c.name}: {c.reason}", REASON_CHARS)
    by_status: dict[str, list[str]] = {}
    for c in found:
        names = by_status.setdefault(c.status, [])
        if c.name not in names:
            names.append(c.name)
    parts = [f"{status}: {', '.join(names)}" for status, names in by_status.items()]
    text = f"{len(found)} problems: {'; '.join(parts)}"
    if len(text) <= REASON_CHARS:
        return text
    return shorten(text, REASON_CHARS - 24) + f" (all {len(found)} listed as causes)"


@dataclass(frozen=True)
class Missed:
    """A stage or a job that did not run, for the "did not run" list beside ``not_run``."""

    what: str
    reason: str


def missed_stages(report: BuildReport) -> list[Missed]:
    """Stages skipped on a job, and jobs that ended skipped without a stage, with why."""
    out: list[Missed] = []
    for job in report.jobs:
        label = f"{job.cell_name or job.kind.value} job"
        for stage in job.stages:
            if stage.status == Status.skipped:
                out.append(Missed(f"{stage.name.value} ({label})", stage.reason or "skipped"))
        if not job.stages and job.outcome == JobOutcome.skipped:
            out.append(Missed(label, job.reason))
    return out


EXIT_CODES: dict[Verdict, int] = {
    Verdict.pass_: 0,
    Verdict.fail: 1,
    Verdict.error: 1,
    Verdict.inconclusive: 2,
    Verdict.incomplete: 2,
    Verdict.pending: 2,
    Verdict.cancelled: 2,
}
