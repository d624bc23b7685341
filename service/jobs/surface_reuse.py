"""Where a build's determinism surface is read: once, by its CPU job.

The surface (every determinism knob of the build, read from its installed source:
``runner/inside/discovery.py``) depends on the wheel alone, so each job's probe read the same
one, and the build's report keeps the first (``core.assemble.first_surface``). A GPU job's probe
reads it only where no CPU job will: the build has none, or its CPU job ended without a probe that
answered. On a GPU host running a CPU runner beside the GPU runner, the GPU job is the build's
critical path, and the reading was most of its probe (1.43 s of 1.60 s for 1.32.0 on a CPU host,
``bench/probe_parts.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from core.verdict import NO_ANSWER, OPEN_JOBS
from core.wire import JobKind, Stage, Status
from service.jobs.refusal_reuse import cpu_job
from service.models import Job


def reads_surface(job: Job, jobs: Iterable[Job]) -> bool:
    """Whether ``job``'s probe reads the build's surface (the lease's ``probe_surface``)."""
    if job.kind != JobKind.gpu:
        return True
    cpu = cpu_job(jobs)
    if cpu is None or Stage.probe not in cpu.stages:
        return True
    probe = next((s for s in cpu.stage_rows if s.name == Stage.probe), None)
    if probe is not None:
        return Status(probe.status) in NO_ANSWER  # it errored or was skipped: read it here
    return cpu.state not in OPEN_JOBS  # ended before its probe: read it here
