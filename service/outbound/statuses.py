"""What GitHub is told about a commit build: one status (or check run) per job, and the gate's.

Contexts: ``fe-ci/build`` (the builder's job), ``fe-ci/probe`` (the CPU job: install, probe,
refusal), ``fe-ci/sm_90``, ``fe-ci/sm_100``, ... (one per GPU family), and ``fe-ci``, which
follows the build's gate (``core/gate.py``: the required checks, ``FE_CI_REQUIRE``) and says the
verdict beside it. A job's own state comes from the verdict rule applied to that job alone
(``core.verdict.judge_job``): a GPU job answers for the subjects of its family, the CPU job also
for the build's error findings (the probe's).

``incomplete`` is never a success: a check run concludes ``neutral``; a commit status, which has
no neutral, says ``error`` with a description of what did not run. Descriptions are cut on a word
boundary at GitHub's 140 characters. Pure functions over the build report.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.gate import ALL, awaits_reused
from core.text import shorten
from core.verdict import ERRORED, judge_job
from core.wire import (
    BuildReport,
    Check,
    Conclusion,
    JobKind,
    JobReport,
    JobState,
    Status,
    Verdict,
)

BUILD_CONTEXT = "fe-ci"
DESCRIPTION_CHARS = 140  # GitHub's limit for a commit status's description
# Commit status states: inconclusive is an error; incomplete too (there is no neutral), with a
# description that says what did not run.
STATES = {
    Verdict.pending: "pending",
    Verdict.pass_: "success",
    Verdict.fail: "failure",
    Verdict.error: "error",
    Verdict.inconclusive: "error",
    Verdict.incomplete: "error",
    Verdict.cancelled: "error",
}
# Check-run conclusions, the same rule in the check-runs vocabulary.
CONCLUSIONS = {
    Verdict.pass_: "success",
    Verdict.fail: "failure",
    Verdict.error: "failure",
    Verdict.inconclusive: "failure",
    Verdict.incomplete: "neutral",
    Verdict.cancelled: "cancelled",
}
# The gate's conclusion as a commit status (no neutral: error, described) and a check run.
GATE_STATES = {
    Conclusion.success: "success",
    Conclusion.failure: "failure",
    Conclusion.neutral: "error",
    Conclusion.pending: "pending",
}
_FAILURE = ERRORED | {Status.fail}  # an annotation's level: failure; others warn


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
    text = "validating" if verdict == Verdict.pending else f"{verdict.value}: {reason}"
    return shorten(text, DESCRIPTION_CHARS)


def gate_description(report: BuildReport) -> str:
    """The ``fe-ci`` context's words: the gate, and the verdict where the two differ."""
    gate = report.gate
    if gate is None or gate.conclusion == Conclusion.pending:
        return "validating"
    if gate.require == [ALL]:
        return description(report.verdict, report.verdict_reason)
    required = f"required checks ({','.join(gate.require)})"
    if gate.conclusion == Conclusion.success:
        text = f"{required} passed"
        if report.verdict == Verdict.pending:
            text += "; validating the rest"
        elif report.verdict != Verdict.pass_:
            text += f"; {description(report.verdict, report.verdict_reason)}"
    else:
        text = f"{required} {gate.reason}"
    return shorten(text, DESCRIPTION_CHARS)


def context(job: JobReport) -> str:
    if job.kind == JobKind.gpu:
        return f"fe-ci/{job.cell_name}"
    return "fe-ci/probe" if job.kind == JobKind.cpu else "fe-ci/build"


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
    ]
    if report.gate is not None:
        required = ", ".join(report.gate.require)
        lines += [
            "",
            f"Gate ({required}): **{report.gate.conclusion.value}**: {report.gate.reason}",
        ]
    lines += ["", f"[The build page]({url})"]
    if job is None and report.causes:
        lines += ["", "### Causes", ""]
        lines += [
            f"- `{c.name}` {c.status}: {c.reason}" + (f" `{c.repro}`" if c.repro else "")
            for c in report.causes
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
        if job.family:
            text = f"waiting for an {job.family} runner"
            if job.cell_name != job.family:
                text += f" for {job.cell_name}"
        else:
            text = f"queued: {job.waiting}" if job.waiting else "queued"
        return status("pending", text, "queued")
    if job.status == JobState.leased:
        return status("pending", f"running on {job.runner or 'a runner'}", "in_progress")
    if job.status == JobState.cancelled:
        verdict, reason = Verdict.cancelled, "the build was cancelled"
    elif why := awaits_reused(report, job):
        return status("pending", why, "in_progress")
    else:
        judged = judge_job(report, job)
        verdict, reason = judged.verdict, judged.reason
    return status(STATES[verdict], description(verdict, reason), "completed", verdict)


def build_statuses(report: BuildReport, public_url: str) -> list[CommitStatus]:
    """Every job's status, then the gate's ``fe-ci`` (posted last)."""
    assert report.id is not None and report.commit is not None
    out = [job_status(report, job, public_url) for job in report.jobs]
    url = f"{public_url.rstrip('/')}/builds/{report.id}"
    conclusion = report.gate.conclusion if report.gate else Conclusion.pending
    done = conclusion != Conclusion.pending
    check_run = "cancelled" if report.verdict == Verdict.cancelled else conclusion.value
    out.append(
        CommitStatus(
            build_id=report.id,
            commit=report.commit,
            context=BUILD_CONTEXT,
            state=GATE_STATES[conclusion],
            description=gate_description(report),
            target_url=url,
            phase="completed" if done else "in_progress",
            conclusion=check_run if done else None,
            summary=_summary(report, None, url),
            annotations=tuple(a for j in report.jobs for a in _annotations(j)),
        )
    )
    return out
