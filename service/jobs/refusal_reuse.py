"""Where a build's refusal decisions are made: once, on the CPU job, unless a family changes them.

On a family whose consumer rows are all intercepted decisions (``core.subjects.reuses_refusal``:
not sm_100) a GPU job would make the CPU job's 80 decisions again, the same way, for 8-13 s; but
the frontend's own refusal rows (``core/frontend_refusals.py``: DSA sparse attention backward and
IndexerBackward must raise on sm_90) run only on such a GPU. So such a job runs the refusal stage
with the lease's ``refusal_scope`` ``"frontend"``: only those rows, and the report shows the CPU
job's decisions for the rest (``service.results.reused_refusal``). An sm_100 job runs every row:
its harness rows differ.

The CPU job is the one source of the consumer's decisions, so a CPU job that ends without them
(its refusal stage errored, timed out, crashed or was skipped, or the job ended before it) leaves
each GPU job claimed afterwards to make them itself (scope ``"all"``), and the build keeps its
refusal coverage. A GPU job claimed earlier ran its frontend rows only; its report says the
decisions it reused were never made (``error``), and the verdict holds below ``pass``.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.frontend_refusals import FRONTEND_ONLY
from core.subjects import reuses_refusal
from core.verdict import NO_ANSWER, OPEN_JOBS
from core.wire import JobKind, JobState, Stage, Status
from service.models import Build, Job, StageRow

ALL_ROWS = "all"


def reuses(job: Job, cpu: Job | None) -> bool:
    """Whether ``job``'s family makes the same consumer decisions as ``cpu``, which makes them."""
    return (
        cpu is not None
        and job.kind == JobKind.gpu
        and reuses_refusal(job.family)
        and Stage.refusal in cpu.stages
    )


def cpu_job(jobs: Iterable[Job]) -> Job | None:
    return next((j for j in jobs if j.kind == JobKind.cpu), None)


def refusal_stage(job: Job) -> StageRow | None:
    return next((s for s in job.stage_rows if s.name == Stage.refusal), None)


def made_decisions(cpu: Job, stage: StageRow | None) -> bool | None:
    """True: the CPU job's refusal stage answered; False: it never will; None: not yet known."""
    if stage is not None and Status(stage.status) not in NO_ANSWER:
        return True
    if cpu.state in OPEN_JOBS:
        return None
    return False


def scope(job: Job, jobs: Iterable[Job]) -> str:
    """The refusal rows ``job``'s lease asks for: ``"frontend"`` where it reuses the CPU job's
    decisions and they are made or still to come, else ``"all"``."""
    cpu = cpu_job(jobs)
    if (
        cpu is not None
        and reuses(job, cpu)
        and made_decisions(cpu, refusal_stage(cpu)) is not False
    ):
        return FRONTEND_ONLY
    return ALL_ROWS


def give_back(build: Build) -> list[Job]:
    """The CPU job ended without its decisions: an unclaimed GPU job made without a refusal stage
    (by a release that left it out on families that reuse) gets it back, and makes them."""
    cpu = cpu_job(build.jobs)
    if cpu is None or made_decisions(cpu, refusal_stage(cpu)) is not False:
        return []
    given = [
        j
        for j in build.jobs
        if reuses(j, cpu)
        and Stage.refusal not in j.stages
        and j.state in (JobState.queued, JobState.waiting)
    ]
    for job in given:
        job.stages = [*job.stages, Stage.refusal]
    return given
