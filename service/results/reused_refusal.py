"""A GPU job that reuses its CPU job's refusal decisions says so in its report.

The job ran no refusal stage (``service/jobs/refusal_reuse.py``); its report gets one that names
the CPU job and carries no rows: the rows are the CPU job's, once, with its ``job_id``. What it
says follows the decisions it reuses, so a family's gate judged on its GPU job alone still sees
them, and nothing reads better than what the CPU job found:

- the CPU job's refusal stage passed (or did not apply): ``not_applicable``, reused;
- it failed or certified nothing: that status, reused (the family's gate fails as before);
- the CPU job is still running: ``skipped`` until it has decided, and the job's family (its
  gate, its GitHub context) ``pending`` meanwhile (``core.gate.awaits_reused``);
- it ended without decisions: ``error`` (its unclaimed GPU jobs were given the stage back).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.verdict import ENDED_WELL
from core.wire import JobReport, Stage, StageResult, Status
from service.jobs.refusal_reuse import cpu_job, made_decisions, reuses
from service.models import Job


def _reused(cpu: Job) -> StageResult:
    stage = next((s for s in cpu.stage_rows if s.name == Stage.refusal), None)
    said = made_decisions(cpu, stage)
    source = f"the cpu job (job {cpu.id})"
    if said is None:
        status, reason = Status.skipped, f"reused from {source}, which has not decided yet"
    elif said is False or stage is None:
        why = stage.reason if stage is not None else cpu.reason
        status = Status.error
        reason = f"reused from {source}, which ended without its decisions: {why}"
    else:
        own = Status(stage.status)
        status = Status.not_applicable if own in ENDED_WELL else own
        reason = (
            f"reused from {source} ({own}): on this family every row is an intercepted "
            "decision, the same as on a CPU; its rows are listed once, under that job"
        )
    return StageResult(name=Stage.refusal, status=status, reason=reason)


def attach(reports: Sequence[JobReport], jobs: Sequence[Job]) -> list[JobReport]:
    """Each report of a GPU job that reuses refusal, with the reused stage after its own."""
    cpu = cpu_job(jobs)
    out = list(reports)
    if cpu is None:
        return out
    by_id = {j.id: j for j in jobs}
    for i, report in enumerate(out):
        job = by_id.get(report.id) if report.id is not None else None
        if job is None or not reuses(job, cpu) or not report.stages:
            continue  # a job that ran nothing (no runner came) shows nothing reused
        stages = [*report.stages, _reused(cpu)]
        out[i] = report.model_copy(update={"stages": stages, "refusal_from": cpu.id})
    return out
