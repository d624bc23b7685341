"""A GPU job that reuses its CPU job's refusal decisions says which rows ran and which it reused.

Such a job ran the refusal stage for the frontend's own rows only (the lease's ``refusal_scope``,
``service/jobs/refusal_reuse.py``): its checks ``frontend_refusal.<row>`` ran here, and its check
``refusal.reused_decisions`` stands for the consumer's rows, which are the CPU job's, listed once
with its ``job_id``. That check, and the stage, take what the reused decisions say, so a family's
gate judged on its GPU job alone still sees them, and nothing reads better than what the CPU job
found:

- the CPU job's refusal stage passed (or did not apply): ``not_applicable``, reused;
- it failed or certified nothing: that status, reused (the family's gate fails as before);
- the CPU job is still running: ``skipped`` until it has decided, and the job's family (its
  gate, its GitHub context) ``pending`` meanwhile (``core.gate.awaits_reused``);
- it ended without decisions: ``error``.

The stage is the worse of its own rows and the reused decisions. A job that ran every row (its
CPU job had ended without decisions when it was claimed) shows its own stage as it is. A job made
without a refusal stage at all (an older build's) shows the reused decisions as its stage.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.frontend_refusals import REUSED_CHECK
from core.verdict import ENDED_WELL, WORST_FIRST
from core.wire import JobReport, Stage, StageResult, Status
from service.jobs.refusal_reuse import cpu_job, made_decisions, refusal_stage, reuses
from service.models import Job


def _reused(cpu: Job) -> tuple[Status, str]:
    stage = refusal_stage(cpu)
    said = made_decisions(cpu, stage)
    source = f"the cpu job (job {cpu.id})"
    if said is None:
        return Status.skipped, f"reused from {source}, which has not decided yet"
    if said is False or stage is None:
        why = stage.reason if stage is not None else cpu.reason
        return Status.error, f"reused from {source}, which ended without its decisions: {why}"
    own = Status(stage.status)
    return (
        Status.not_applicable if own in ENDED_WELL else own,
        f"reused from {source} ({own}): on this family the consumer's rows are intercepted "
        "decisions, the same as on a CPU; they are listed once, under that job",
    )


def _merged(own: StageResult, cpu: Job) -> StageResult:
    """The job's frontend rows as they ran, and the consumer's rows as the CPU job decided."""
    status, reason = _reused(cpu)
    checks = [
        c.model_copy(update={"status": status, "detail": reason}) if c.name == REUSED_CHECK else c
        for c in own.checks
    ]
    # the rows that ran here, grouped by how each ended (one not covered here is no pass)
    ended: dict[Status, list[str]] = {}
    for c in own.checks:
        if c.name != REUSED_CHECK:
            ended.setdefault(c.status, []).append(c.name)
    ran = "; ".join(f"{', '.join(names)} ({st})" for st, names in ended.items())
    worst = min((own.status, status), key=WORST_FIRST.index)
    text = f"ran here: {ran or f'no row ({own.status})'}; the consumer's rows {reason}"
    return own.model_copy(update={"status": worst, "reason": text, "checks": checks})


def attach(reports: Sequence[JobReport], jobs: Sequence[Job]) -> list[JobReport]:
    """Each report of a GPU job that reuses refusal decisions, with what it reused said."""
    cpu = cpu_job(jobs)
    out = list(reports)
    if cpu is None:
        return out
    by_id = {j.id: j for j in jobs}
    for i, report in enumerate(out):
        job = by_id.get(report.id) if report.id is not None else None
        if job is None or not reuses(job, cpu) or not report.stages:
            continue  # a job that ran nothing (no runner came) shows nothing reused
        own = next((s for s in report.stages if s.name == Stage.refusal), None)
        if own is None and Stage.refusal not in job.stages:  # made without one: all reused
            status, reason = _reused(cpu)
            stages = [*report.stages, StageResult(name=Stage.refusal, status=status,
                                                  reason=reason)]  # fmt: skip
        elif own is not None and any(c.name == REUSED_CHECK for c in own.checks):
            stages = [_merged(own, cpu) if s is own else s for s in report.stages]
        else:
            continue  # it made every decision itself, or has not reported its refusal yet
        out[i] = report.model_copy(update={"stages": stages, "refusal_from": cpu.id})
    return out
