"""Every change of a job's state, and the transitions allowed, written once.

::

    waiting --(wheel built)--> queued --(claim)--> leased --(finish)--> finished
       |                        |  ^                 |
       |                        |  +--(lease lost, handed back: next attempt)
       +--> finished (skipped)  +--> finished (skipped: no runner of its family in time)
    waiting, queued, leased --(cancel)--> cancelled

A job that ends gets its ``outcome`` (``core.wire.JobOutcome``) with its state, and a human
``reason``; readers judge by the outcome, never by the reason's words. The GPU wait rule (how
long a GPU job waits for a runner of its family, counted from when it has a wheel) is here too.
The claim itself is one UPDATE in ``queue.claim`` (racing runners never share a job); it moves a
job only along ``queued -> leased``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from core.wire import JobKind, JobOutcome, JobState
from service.config import Settings
from service.models import Job

ALLOWED: dict[JobState, frozenset[JobState]] = {
    JobState.waiting: frozenset({JobState.queued, JobState.finished, JobState.cancelled}),
    JobState.queued: frozenset({JobState.leased, JobState.finished, JobState.cancelled}),
    JobState.leased: frozenset({JobState.queued, JobState.finished, JobState.cancelled}),
    JobState.finished: frozenset(),
    JobState.cancelled: frozenset(),
}


class NotAllowed(RuntimeError):
    """A change of state the table above does not allow: a bug, never a client's error."""


def _move(job: Job, to: JobState) -> None:
    if to not in ALLOWED[JobState(job.state)]:
        raise NotAllowed(f"job {job.id}: {job.state} -> {to} is not a transition")
    job.state = to


def gpu_wait_deadline(settings: Settings, now: datetime) -> datetime:
    """Until when a GPU job waits for a runner of its family."""
    return now + timedelta(hours=settings.gpu_wait_hours)


def end(job: Job, outcome: JobOutcome, reason: str, now: datetime) -> None:
    """The job ended (``finished``, or ``cancelled`` for that outcome): nothing more runs. A
    cancelled lease keeps its token, so its runner hears of it at its next heartbeat."""
    _move(job, JobState.cancelled if outcome == JobOutcome.cancelled else JobState.finished)
    job.outcome = outcome
    job.reason = reason
    job.finished_at = now


def requeue(job: Job, *, next_attempt: bool) -> None:
    """A lease that ended without a result: queued again, as the next attempt or the same one."""
    _move(job, JobState.queued)
    job.runner_id = None
    job.lease_token_hash = None
    job.lease_expires_at = None
    if next_attempt:
        job.attempt += 1
    else:
        job.started_at = None


def release(job: Job, now: datetime) -> None:
    """A waiting job's wheel is there: it is queued, and a GPU job's wait starts now."""
    _move(job, JobState.queued)
    if job.kind == JobKind.gpu and job.wait_deadline is not None:
        job.wait_deadline = now + (job.wait_deadline - job.created_at)
