"""Reruns: a finished build, or one job of it, run again as a new build of the same artifact.

A finished build never changes: its report is stored and served by ETag from every service
process (``service/results/stored_reports.py``), later builds compared themselves with it, and
bisections judged it. So a rerun is a new build (``Build.rerun_of`` names the original), never
a re-queue:

- ``rerun_build``: the same wheel, or the same commit (its wheel is reused when it was built),
  with the jobs a submission gets now;
- ``rerun_job``: a copy of the build whose other jobs keep the results they had (finished, as
  they were) and whose one chosen job runs again, as a CI's "re-run this job" does; each copied
  stage log keeps at most its last ``LOG_COPY_CHARS`` (the whole one is the original build's).

How many reruns a token may have queued is ``service/jobs/quotas.py``'s.

A rerun keeps the branch only when it repeats the branch's newest build: the rerun of an older
commit must not become the branch's head (the badge, notifications and bisections read it).
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.wire import WHEEL_SOURCES, JobKind, JobState
from service.config import Settings
from service.errors import Conflict
from service.jobs import queue, transitions
from service.models import PER_JOB_TABLES, Build, DeterminismRecord, Job, StageLog, utcnow
from service.results import events
from service.uploads import uploads

T = TypeVar("T")

# A job rerun keeps at most this much of each copied stage's log (the end, as the page shows it);
# the whole log stays with the original build. 50 job reruns used to add 9.6 MB of copies.
LOG_COPY_CHARS = 2048


def _check_rerunnable(settings: Settings, build: Build) -> None:
    if build.finished_at is None:
        raise Conflict(
            f"build {build.id} is still running; wait for it, or cancel it, then rerun it",
            detail={"build_id": build.id},
        )
    stored = build.sha256 is not None and uploads.blob_path(settings.data_dir, build.sha256)
    if build.source in WHEEL_SOURCES and not (stored and stored.is_file()):
        raise Conflict(f"the wheel of build {build.id} is no longer stored; submit it again")


def _is_branch_head(session: Session, build: Build) -> bool:
    newest = session.scalars(
        select(Build.id)
        .where(Build.source == build.source, Build.branch == build.branch)
        .where(Build.bisection_id.is_(None))
        .order_by(Build.id.desc())
        .limit(1)
    ).first()
    return newest == build.id


def _copy_build(session: Session, build: Build) -> Build:
    keep_branch = build.bisection_id is None and _is_branch_head(session, build)
    return Build(
        source=build.source,
        version=build.version,
        sha256=build.sha256 if build.source in WHEEL_SOURCES else None,
        filename=build.filename if build.source in WHEEL_SOURCES else None,
        size=build.size if build.source in WHEEL_SOURCES else None,
        repo=build.repo,
        commit=build.commit,
        branch=build.branch if keep_branch else None,
        message=build.message,
        submitted_by=build.submitted_by,
        rerun_of=build.id,
    )


def rerun_build(session: Session, reactions: events.Reactions, build: Build) -> Build:
    """A new build of the same artifact, with fresh jobs."""
    settings = reactions.settings
    _check_rerunnable(settings, build)
    new = _copy_build(session, build)
    session.add(new)
    queue.create_jobs(session, new, settings)
    queue.announce(session, new, reactions)
    return new


def _clone(row: T, **changes: Any) -> T:
    """A new row of the same table with the same column values (but its id), and ``changes``."""
    mapper = row.__mapper__  # type: ignore[attr-defined]
    values = {c.key: getattr(row, c.key) for c in mapper.column_attrs if c.key != "id"}
    values.update(changes)
    return type(row)(**values)


def _log_copy(row: StageLog, build_id: int) -> dict[str, str]:
    """The copied log's text: the whole log when it is short, else its end under a note."""
    if len(row.text) <= LOG_COPY_CHARS:
        return {}
    note = f"(the end of this stage's log; the whole log is build {build_id}'s)\n"
    return {"text": note + row.text[-(LOG_COPY_CHARS - len(note)) :]}


def rerun_job(session: Session, reactions: events.Reactions, build: Build, job: Job) -> Build:
    """A copy of the build in which ``job`` runs again and every other job keeps its results."""
    settings = reactions.settings
    _check_rerunnable(settings, build)
    if build.cancelled_at is not None:
        raise Conflict(f"build {build.id} was cancelled; rerun the whole build")
    if job.kind == JobKind.build or (build.source == "commit" and build.sha256 is None):
        return rerun_build(session, reactions, build)  # no wheel yet: everything runs again
    now = utcnow()
    new = _copy_build(session, build)
    new.sha256, new.filename, new.size = build.sha256, build.filename, build.size
    session.add(new)
    session.flush()
    copies: dict[int | None, int | None] = {None: None}
    for old in build.jobs:
        if old.id == job.id:
            fresh = Job(
                kind=old.kind,
                family=old.family,
                cell=old.cell,
                requires=old.requires,
                stages=list(old.stages),
                subjects=old.subjects,
                state=JobState.queued,
                created_at=now,
            )
            if old.kind == JobKind.gpu:
                fresh.wait_deadline = transitions.gpu_wait_deadline(settings, now)
            new.jobs.append(fresh)
            continue
        copy = _clone(old, build_id=new.id, lease_token_hash=None, lease_expires_at=None)
        new.jobs.append(copy)
        session.flush()
        copies[old.id] = copy.id
        for stage in old.stage_rows:
            stage_copy = _clone(stage, job_id=copy.id)
            stage_copy.checks = [_clone(c, stage_id=None) for c in stage.checks]
            session.add(stage_copy)
    for table in PER_JOB_TABLES:
        rows = session.scalars(select(table).where(table.build_id == build.id))
        # a measurement counts once: a copied determinism record is marked, and the band,
        # the previous comparable build and the trends read the one it was copied from
        marked = {"copied": True} if table is DeterminismRecord else {}
        for row in rows:
            if row.job_id in copies:
                logged = _log_copy(row, build.id) if isinstance(row, StageLog) else {}
                extra = {**marked, **logged}
                session.add(_clone(row, build_id=new.id, job_id=copies[row.job_id], **extra))
    queue.announce(session, new, reactions)
    return new
