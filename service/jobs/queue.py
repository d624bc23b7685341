"""Jobs: creation per build, claiming in one statement, leases, expiry and the GPU wait deadline."""

from __future__ import annotations

import hashlib
import logging
import secrets
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, case, delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from core import cells
from core.verdict import OPEN_JOBS
from core.wire import JobKind, JobOutcome, JobState, Stage
from service.config import Settings
from service.db import locks_rows
from service.jobs import capable, transitions
from service.models import PER_JOB_TABLES, Artifact, Build, Job, Runner, StageRow, utcnow
from service.results import events

log = logging.getLogger("fe_ci.queue")

MAX_ATTEMPTS = 3
CPU_STAGES = [Stage.install, Stage.probe, Stage.refusal]
GPU_STAGES = [Stage.install, Stage.probe, Stage.determinism, Stage.numerics, Stage.refusal]


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def gpu_families(session: Session, settings: Settings, now: datetime) -> list[str]:
    if settings.gpu_archs == ["auto"]:
        return capable.alive_families(session, settings, now)
    return sorted({f for f in settings.gpu_archs if f != "auto"})


def matrix_cells(
    families: list[str],
    settings: Settings,
    only: tuple[list[Stage], str | None, list[str] | None] | None = None,
) -> list[cells.Cell]:
    """The cells a build's GPU work covers: each family x each backend of ``FE_CI_MATRIX``; a
    job of ``only`` (a bisection step) names one cell, its family's name or a cell's."""
    if only is not None:
        return [cells.Cell.parse(f) for f in families]
    return cells.expand(families, settings.matrix_axes)


def create_jobs(
    session: Session,
    build: Build,
    settings: Settings,
    *,
    only: tuple[list[Stage], str | None, list[str] | None] | None = None,
) -> list[Job]:
    """A ``cpu`` job, and one ``gpu`` job per family to cover (``build`` first for commits); a
    GPU job's refusal stage runs the frontend's own rows only where its family reuses the CPU
    job's decisions for the consumer's (its lease's ``refusal_scope``).

    ``only=(stages, family, subjects)``: one job that runs just those stages (and subjects), the
    CPU job where ``family`` is None, else that family's GPU job (a bisection step runs only what
    decides its question).
    """
    now = utcnow()
    jobs: list[Job] = []
    first_state = JobState.queued
    if build.source == "commit" and build.sha256 is None:
        reuse_artifact(session, build)
    if build.source == "commit" and build.sha256 is None:
        builder = cells.requires_text({cells.BUILDER: ""})
        jobs.append(
            Job(kind=JobKind.build, stages=[Stage.build], state=JobState.queued, requires=builder)
        )
        first_state = JobState.waiting
    stages, only_family, subjects = only if only is not None else (list(CPU_STAGES), None, None)
    if only is None or only_family is None:
        jobs.append(Job(kind=JobKind.cpu, stages=list(stages), state=first_state))
    deadline = transitions.gpu_wait_deadline(settings, now)
    families = gpu_families(session, settings, now) if only is None else [only_family]
    for cell in matrix_cells([f for f in families if f], settings, only):
        if only is None:  # refusal rows by family: service/jobs/refusal_reuse.py
            stages = list(GPU_STAGES)
        jobs.append(
            Job(
                kind=JobKind.gpu,
                family=cell.family,
                cell=cell.name,
                requires=cells.requires_text(cell.requirements),
                stages=list(stages),
                subjects=subjects,
                state=first_state,
                wait_deadline=deadline,
            )
        )
    for job in jobs:
        job.created_at = now
        build.jobs.append(job)
    return jobs


def announce(session: Session, build: Build, reactions: events.Reactions) -> None:
    """A new build: store its first verdict (pending); a commit build's statuses go out."""
    session.flush()
    events.job_changed(session, build.id, reactions)


def reuse_artifact(session: Session, build: Build) -> bool:
    """A commit already built (same repository) needs no build job: a rebuild is free."""
    art = session.scalars(
        select(Artifact)
        .where(Artifact.repo == build.repo, Artifact.commit == build.commit)
        .order_by(Artifact.id.desc())
    ).first()
    if art is None:
        return False
    build.sha256, build.filename, build.size, build.version = (
        art.sha256,
        art.filename,
        art.size,
        art.version,
    )
    return True


def _clear_attempt(session: Session, job_id: int) -> None:
    """Remove what an abandoned attempt reported, so a build ends with one set of results."""
    for table in PER_JOB_TABLES:
        session.execute(delete(table).where(table.job_id == job_id))
    session.execute(delete(StageRow).where(StageRow.job_id == job_id))


def _skip_locked(session: Session, stmt: Select[Any]) -> Select[Any]:
    """Rows another transaction is changing are not ours to take: skip them where rows lock."""
    return stmt.with_for_update(skip_locked=True) if locks_rows(session) else stmt


def end_attempt(session: Session, job: Job, now: datetime) -> None:
    """The leased attempt is over without a result (its lease expired, or its runner gave it up):
    queue the job again as the next attempt (at most 3), what the attempt posted removed."""
    _clear_attempt(session, job.id)
    if job.attempt >= MAX_ATTEMPTS:
        job.runner_id = None
        job.lease_expires_at = None
        reason = f"error: the lease expired {job.attempt} times (runner lost)"
        transitions.end(job, JobOutcome.error, reason, now)
    else:
        transitions.requeue(job, next_attempt=True)


def seen_claiming(session: Session, runner_id: int, since: datetime) -> Runner | None:
    """The runner of a claim waiting since ``since``, marked seen and held until the claim
    commits (Postgres: its row; SQLite: the write lock), so that its going offline and the claim
    never cross; None if it said it is stopping since."""
    runner = session.get(Runner, runner_id, with_for_update=True)
    assert runner is not None
    runner.last_seen_at = utcnow()
    session.flush()
    session.refresh(runner, ["offline_at"])
    if runner.offline_at is not None and runner.offline_at >= since:
        return None
    runner.offline_at = None  # a call after it stopped: alive again
    return runner


def give_up_leases(
    session: Session, runner_id: int, keep: set[int], reactions: events.Reactions
) -> list[int]:
    """End the attempts leased to a runner that gave them up (it restarted, or is stopping),
    but for the jobs in ``keep`` (it holds their results); the ids of the jobs handed back.

    The query flushes the caller's change to the runner row first, so a claim of the runner
    racing this one waits for it and sees it (``seen_claiming``)."""
    jobs = session.scalars(
        select(Job).where(Job.runner_id == runner_id, Job.state == JobState.leased)
    ).all()
    now = utcnow()
    handed = [job for job in jobs if job.id not in keep]
    for job in handed:
        end_attempt(session, job, now)
        log.warning(
            "event=lease_given_up job=%s attempt=%s state=%s", job.id, job.attempt, job.state
        )
    for build_id in sorted({job.build_id for job in handed}):
        events.job_changed(session, build_id, reactions)
    return [job.id for job in handed]


def hand_back(
    sessions: sessionmaker[Session], job_id: int, lease_token: str, reactions: events.Reactions
) -> None:
    """A lease that never reached its runner (the claim's client was gone): the same attempt is
    queued again, as if never taken."""
    with sessions() as session:
        hold_writes(session)
        job = session.get(Job, job_id, with_for_update=True)
        if job is None or job.state != JobState.leased:
            return
        if job.lease_token_hash != hash_token(lease_token):
            return
        transitions.requeue(job, next_attempt=False)
        log.info("event=lease_handed_back job=%s (the claim's client was gone)", job.id)
        events.job_changed(session, job.build_id, reactions)
        session.commit()


def hold_writes(session: Session) -> None:
    """SQLite: take the database's write lock before reading what will be written back, so no
    other writer changes it between the read and the write (Postgres locks the selected rows
    instead, ``_skip_locked``). Without it, a sweep that read an expired lease could write its
    requeue over the claim that another request's sweep and claim had committed meanwhile."""
    if not locks_rows(session):
        session.execute(
            update(Job)
            .where(Job.id == -1)
            .values(state=Job.state)
            .execution_options(synchronize_session=False)
        )


def sweep(session: Session, reactions: events.Reactions, now: datetime | None = None) -> int:
    """Requeue expired leases (attempt + 1, at most 3) and end GPU jobs past their wait."""
    now = now or utcnow()
    changed = 0
    hold_writes(session)
    expired = session.scalars(
        _skip_locked(
            session, select(Job).where(Job.state == JobState.leased, Job.lease_expires_at < now)
        )
    ).all()
    for job in expired:
        end_attempt(session, job, now)
        log.warning(
            "event=lease_expired job=%s attempt=%s state=%s", job.id, job.attempt, job.state
        )
        changed += 1
    overdue = session.scalars(
        _skip_locked(
            session,
            select(Job).where(
                Job.state == JobState.queued, Job.kind == JobKind.gpu, Job.wait_deadline < now
            ),
        )
    ).all()
    for job in overdue:
        backend = cells.parse_requires(job.requires).get(cells.CUDNN)
        offering = f" offering cudnn={backend}" if backend else ""
        reason = f"skipped: no {job.family} runner{offering}"
        transitions.end(job, JobOutcome.skipped, reason, now)
        changed += 1
    if changed:
        session.flush()
        for build_id in sorted({j.build_id for j in (*expired, *overdue)}):  # one lock order
            events.job_changed(session, build_id, reactions)
    return changed


def claimable(session: Session, runner: Runner) -> list[str]:
    """The requirements of queued jobs that this runner's labels satisfy (``core.cells``): a
    handful of distinct texts however long the queue, matched here rather than in SQL."""
    queued = session.scalars(select(Job.requires).where(Job.state == JobState.queued).distinct())
    labels = runner.labels or {}
    return [r for r in queued if cells.satisfied(cells.parse_requires(r), labels)]


def claim(session: Session, runner: Runner, lease_seconds: int) -> tuple[Job, str] | None:
    """Lease the oldest job this runner can take, in one UPDATE so racing runners never share."""
    now = utcnow()
    matches = Job.requires.in_(claimable(session, runner))
    # A GPU runner prefers the work only it can do.
    preference = case((Job.requires == "", 1), else_=0)
    pick = (
        select(Job.id)
        .where(Job.state == JobState.queued, matches)
        .order_by(preference, Job.id)
        .limit(1)
    )
    pick = _skip_locked(session, pick)
    token = secrets.token_urlsafe(24)
    job_id = session.execute(
        update(Job)
        .where(Job.id == pick.scalar_subquery(), Job.state == JobState.queued)
        .values(
            state=JobState.leased,
            runner_id=runner.id,
            lease_token_hash=hash_token(token),
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            started_at=now,
        )
        .returning(Job.id)
        .execution_options(synchronize_session=False)
    ).scalar_one_or_none()
    if job_id is None:
        return None
    job = session.get(Job, job_id, populate_existing=True)
    assert job is not None
    return job, token


def cancel_build(
    session: Session, build: Build, reactions: events.Reactions, reason: str = "cancelled"
) -> None:
    """Queued jobs end; a running stage is stopped at its next heartbeat."""
    now = utcnow()
    build.cancelled_at = build.cancelled_at or now
    for job in session.scalars(select(Job).where(Job.build_id == build.id)):
        if job.state in OPEN_JOBS:
            transitions.end(job, JobOutcome.cancelled, reason, now)
    events.job_changed(session, build.id, reactions)


def release_waiting(session: Session, build: Build) -> None:
    """A finished ``build`` job releases the jobs that waited for its wheel (or ends them)."""
    now = utcnow()
    for job in build.jobs:
        if job.state != JobState.waiting:
            continue
        if build.sha256 is None:
            reason = "skipped: the build job produced no wheel"
            transitions.end(job, JobOutcome.skipped, reason, now)
        else:
            transitions.release(job, now)
