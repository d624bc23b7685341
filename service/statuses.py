"""What GitHub is told about a commit build: one status (or check run) per job, and the build's.

Contexts: ``fe-ci/build`` (the builder's job), ``fe-ci/probe`` (the CPU job: install, probe,
refusal), ``fe-ci/sm_90``, ``fe-ci/sm_100``, ... (one per GPU family), and ``fe-ci/determinism``,
the build's verdict (core/verdict.py). A job's own state comes from the same verdict rule
applied to that job alone: a GPU job answers for the subjects of its family, the CPU job also
for the build's error findings (the probe's). Pure functions over the build report.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.subjects import SUBJECTS
from core.verdict import judge
from core.wire import (
    BuildReport,
    Check,
    JobKind,
    JobReport,
    JobState,
    Severity,
    Status,
    Verdict,
)

BUILD_CONTEXT = "fe-ci/determinism"
# Commit status states; DESIGN.md: inconclusive is an error, incomplete a success that says so.
STATES = {
    Verdict.pending: "pending",
    Verdict.pass_: "success",
    Verdict.fail: "failure",
    Verdict.error: "error",
    Verdict.inconclusive: "error",
    Verdict.incomplete: "success",
    Verdict.cancelled: "error",
}
# Check-run conclusions, the same rule in the check-runs vocabulary.
CONCLUSIONS = {
    Verdict.pass_: "success",
    Verdict.fail: "failure",
    Verdict.error: "failure",
    Verdict.inconclusive: "failure",
    Verdict.incomplete: "success",
    Verdict.cancelled: "cancelled",
}
_FAILURE = {Status.fail, Status.error, Status.timeout, Status.crashed}


@dataclass(frozen=True)
class Annotation:
    title: str
    level: str  # check-run annotation level: "failure" | "warning"
    message: str


@dataclass(frozen=True)
class CommitStatus:
    build_id: int
    commit: str
    context: str
    state: str  # commit status: pending | success | failure | error
    description: str
    target_url: str
    phase: str  # check run: queued | in_progress | completed
    conclusion: str | None = None
    summary: str = ""
    annotations: tuple[Annotation, ...] = ()

    @property
    def signature(self) -> tuple[str, str, str | None, str]:
        """What a repeated post would change; equal signatures are sent once."""
        return (self.state, self.phase, self.conclusion, self.description)


def description(verdict: Verdict, reason: str) -> str:
    if verdict == Verdict.incomplete:
        text = f"incomplete: {reason}"
    elif verdict == Verdict.pending:
        text = "validating"
    else:
        text = f"{verdict.value}: {reason}"
    return text[:140]  # GitHub's limit


def context(job: JobReport) -> str:
    if job.kind == JobKind.gpu:
        return f"fe-ci/{job.family}"
    return "fe-ci/probe" if job.kind == JobKind.cpu else "fe-ci/build"


def judge_job(report: BuildReport, job: JobReport) -> tuple[Verdict, str]:
    """The verdict rule on one job: its stages, its family's subjects, the probe's errors."""
    caps = {
        name: cap
        for name, cap in report.capabilities.items()
        if job.kind == JobKind.gpu and name in SUBJECTS and job.family in SUBJECTS[name].families
    }
    errors = [f for f in report.findings if f.severity == Severity.error]
    alone = report.model_copy(
        update={
            "jobs": [job],
            "capabilities": caps,
            "findings": errors if job.kind == JobKind.cpu else [],
        }
    )
    judgement = judge(alone)
    return judgement.verdict, judgement.reason


def _annotations(job: JobReport) -> tuple[Annotation, ...]:
    where = f" on an {job.family} machine" if job.family else ""
    out = []
    for stage in job.stages:
        for check in stage.checks:
            if not check.repro:
                continue
            out.append(
                Annotation(
                    title=f"{stage.name.value}: {check.name} {check.status.value}",
                    level="failure" if check.status in _FAILURE else "warning",
                    message=f"{check.detail[:3000]}\n\nReproduce{where}: {check.repro}",
                )
            )
    return tuple(out)


def _summary(report: BuildReport, job: JobReport | None, url: str) -> str:
    lines = [
        f"Build {report.id} ({report.version or '?'}): **{report.verdict.value}**: "
        f"{report.verdict_reason}",
        "",
        f"[The build page]({url})",
    ]
    for j in [job] if job else report.jobs:
        lines += ["", f"### {context(j)} (job {j.id}): {j.status.value} {j.reason}".rstrip()]
        lines += ["", "| stage | status | reason |", "|---|---|---|"]
        lines += [f"| {s.name.value} | {s.status.value} | {s.reason[:200]} |" for s in j.stages]
        failing: list[Check] = [c for s in j.stages for c in s.checks if c.repro]
        lines += [f"- `{c.name}` {c.status.value}: `{c.repro}`" for c in failing]
    if report.findings:
        lines += ["", "### Findings", ""]
        lines += [f"- {f.severity.value} `{f.kind}`: {f.message[:300]}" for f in report.findings]
    return "\n".join(lines)[:60000]  # GitHub's limit is 65535 characters


def job_status(report: BuildReport, job: JobReport, public_url: str) -> CommitStatus:
    assert report.id is not None and report.commit is not None
    url = f"{public_url.rstrip('/')}/builds/{report.id}#job-{job.id}"

    def status(state: str, text: str, phase: str, verdict: Verdict | None = None) -> CommitStatus:
        done = verdict is not None
        return CommitStatus(
            build_id=report.id or 0,
            commit=report.commit or "",
            context=context(job),
            state=state,
            description=text,
            target_url=url,
            phase=phase,
            conclusion=CONCLUSIONS.get(verdict, "neutral") if verdict is not None else None,
            summary=_summary(report, job, url) if done else "",
            annotations=_annotations(job) if done else (),
        )

    if job.status == JobState.waiting:
        return status("pending", "waiting for the wheel", "queued")
    if job.status == JobState.queued:
        return status(
            "pending", f"waiting for an {job.family} runner" if job.family else "queued", "queued"
        )
    if job.status == JobState.leased:
        return status("pending", f"running on {job.runner or 'a runner'}", "in_progress")
    if job.status == JobState.cancelled:
        verdict, reason = Verdict.cancelled, "the build was cancelled"
    else:
        verdict, reason = judge_job(report, job)
    return status(STATES[verdict], description(verdict, reason), "completed", verdict)


def build_statuses(report: BuildReport, public_url: str) -> list[CommitStatus]:
    """Every job's status, then the build's (so the build's verdict is posted last)."""
    assert report.id is not None and report.commit is not None
    out = [job_status(report, job, public_url) for job in report.jobs]
    url = f"{public_url.rstrip('/')}/builds/{report.id}"
    done = report.verdict != Verdict.pending
    out.append(
        CommitStatus(
            build_id=report.id,
            commit=report.commit,
            context=BUILD_CONTEXT,
            state=STATES[report.verdict],
            description=description(report.verdict, report.verdict_reason),
            target_url=url,
            phase="completed" if done else "in_progress",
            conclusion=CONCLUSIONS.get(report.verdict) if done else None,
            summary=_summary(report, None, url),
            annotations=tuple(a for j in report.jobs for a in _annotations(j)),
        )
    )
    return out
