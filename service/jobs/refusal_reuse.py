"""Where a build's refusal decisions are made: once, on the CPU job, unless a family changes them.

On a family whose refusal rows are all intercepted decisions (``core.subjects.reuses_refusal``:
not sm_100) a GPU job would make the CPU job's 80 decisions again, the same way, for 8-13 s; so
such a job is created without the refusal stage and the report shows the CPU job's decisions on
it (``service.results.reused_refusal``). An sm_100 job runs its own: its harness rows differ.

The CPU job is the one source, so a CPU job that ends without its decisions (its refusal stage
errored, timed out, crashed or was skipped, or the job ended before it) hands the stage back to
each GPU job of the build that reuses them and has not been claimed yet: that job then runs it,
and the build keeps its refusal coverage. A GPU job already claimed cannot be given a stage; its
report says the decisions it reused were never made (``error``), and the verdict holds below
``pass``.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.subjects import reuses_refusal
from core.verdict import NO_ANSWER, OPEN_JOBS
from core.wire import JobKind, JobState, Stage, Status
from service.models import Build, Job, StageRow


def gpu_stages(stages: Iterable[Stage], family: str, *, has_cpu_job: bool) -> list[Stage]:
    """A GPU job's stages: without refusal where its family reuses the CPU job's decisions."""
    if has_cpu_job and reuses_refusal(family):
        return [s for s in stages if s != Stage.refusal]
    return list(stages)


def reuses(job: Job, cpu: Job | None) -> bool:
    """Whether ``job`` shows ``cpu``'s refusal decisions instead of making its own."""
    return (
        cpu is not None
        and job.kind == JobKind.gpu
        and reuses_refusal(job.family)
        and Stage.refusal not in job.stages
        and Stage.refusal in cpu.stages
    )


def cpu_job(jobs: Iterable[Job]) -> Job | None:
    return next((j for j in jobs if j.kind == JobKind.cpu), None)


def made_decisions(cpu: Job, stage: StageRow | None) -> bool | None:
    """True: the CPU job's refusal stage answered; False: it never will; None: not yet known."""
    if stage is not None and Status(stage.status) not in NO_ANSWER:
        return True
    if cpu.state in OPEN_JOBS:
        return None
    return False


def give_back(build: Build) -> list[Job]:
    """The CPU job ended without its decisions: each unclaimed GPU job reusing them runs refusal."""
    cpu = cpu_job(build.jobs)
    if cpu is None:
        return []
    stage = next((s for s in cpu.stage_rows if s.name == Stage.refusal), None)
    if made_decisions(cpu, stage) is not False:
        return []
    given = [
        j for j in build.jobs if reuses(j, cpu) and j.state in (JobState.queued, JobState.waiting)
    ]
    for job in given:
        job.stages = [*job.stages, Stage.refusal]
    return given
