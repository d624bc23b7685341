"""Builds: the list (newest first, paged by cursor), one build's report, its logs and wheel,
cancellation and reruns (``service/jobs/reruns.py`` says why a rerun is a new build)."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, PlainTextResponse
from sqlalchemy.orm import selectinload

from core.wire import BuildAccepted, BuildReport, BuildsPage, Stage
from service.deps import (
    MAX_ID,
    CursorQuery,
    IdPath,
    SessionDep,
    SettingsDep,
    StateDep,
    SubmitterDep,
)
from service.errors import Conflict, NotFound
from service.jobs import queue, quotas, reruns
from service.models import Build, Job
from service.openapi import errors
from service.results import logs, stored_reports
from service.results.assemble import build_report, summary
from service.results.build_list import filtered_builds
from service.state import ServiceState
from service.uploads import uploads

log = logging.getLogger("fe_ci.builds")
router = APIRouter(prefix="/api/builds", tags=["builds"])


def list_builds(
    session: SessionDep,
    *,
    cursor: int | None = None,
    limit: int = 50,
    source: str | None = None,
    branch: str | None = None,
    verdict: str | None = None,
) -> BuildsPage:
    stmt = filtered_builds(cursor=cursor, source=source, branch=branch, verdict=verdict)
    rows = list(session.scalars(stmt.options(selectinload(Build.jobs)).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return BuildsPage(items=[summary(b) for b in rows], next_cursor=rows[-1].id if more else None)


@router.get("", response_model=BuildsPage)
def read_builds(
    session: SessionDep,
    cursor: CursorQuery = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    source: Annotated[str | None, Query(pattern="^(wheel|commit|release)$")] = None,
    branch: Annotated[str | None, Query(max_length=300)] = None,
    verdict: Annotated[str | None, Query(max_length=16)] = None,
) -> BuildsPage:
    """Build summaries, newest first; pass ``next_cursor`` back as ``cursor`` for the next page."""
    return list_builds(
        session, cursor=cursor, limit=limit, source=source, branch=branch, verdict=verdict
    )


def get_build(session: SessionDep, build_id: int) -> Build:
    build = session.get(Build, build_id)
    if build is None:
        raise NotFound(f"no build {build_id}")
    return build


def _rendered(state: ServiceState, build_id: int) -> stored_reports.Rendered:
    require = state.settings.require
    with state.sessions() as session:
        found = stored_reports.stored(session, build_id, require)
        if found is not None:
            return found
        report = build_report(session, get_build(session, build_id), state.settings)
        return stored_reports.keep_after_read(session, build_id, report, require)


@router.get(
    "/{build_id}",
    response_model=BuildReport,
    responses={304: {"description": "not modified: the client's ETag is current"}},
)
async def read_build(request: Request, state: StateDep, build_id: IdPath) -> Response:
    """One build's full report: capabilities, findings, jobs and stages, drift, refusal.

    With an ``ETag``; a finished build's report never changes and is served as stored.
    """
    rendered = stored_reports.MEMORY.get(build_id)  # a finished report, read before: no database
    if rendered is None:
        rendered = await run_in_threadpool(_rendered, state, build_id)
    return stored_reports.respond(request, rendered)


@router.post("/{build_id}/cancel", response_model=BuildReport, responses=errors(409))
def cancel_build(
    state: StateDep, session: SessionDep, _submitter: SubmitterDep, build_id: IdPath
) -> BuildReport:
    """Cancel a build: queued jobs end, a running stage is stopped at its next heartbeat."""
    build = get_build(session, build_id)
    if build.finished_at is not None and build.cancelled_at is None:
        raise Conflict(f"build {build_id} already finished")
    queue.cancel_build(session, build, state.reactions)
    session.commit()
    state.wake.queue_changed()
    return stored_reports.current(session, build, state.settings)


@router.post(
    "/{build_id}/rerun",
    status_code=202,
    response_model=BuildAccepted,
    responses=errors(409, 429),
)
def rerun_build(
    state: StateDep,
    session: SessionDep,
    _submitter: SubmitterDep,
    build_id: IdPath,
) -> BuildAccepted:
    """Run a finished build again: a new build of the same wheel or commit, with fresh jobs."""
    build = get_build(session, build_id)
    with quotas.admission(session, state.settings):
        new = reruns.rerun_build(session, state.reactions, build)
        session.commit()
    log.info("event=build_rerun build=%s of=%s", new.id, build_id)
    state.wake.queue_changed()
    return BuildAccepted(build_id=new.id, url=f"/builds/{new.id}")


@router.post(
    "/{build_id}/jobs/{job_id}/rerun",
    status_code=202,
    response_model=BuildAccepted,
    responses=errors(409, 429),
)
def rerun_job(
    state: StateDep,
    session: SessionDep,
    _submitter: SubmitterDep,
    build_id: IdPath,
    job_id: IdPath,
) -> BuildAccepted:
    """Run one job of a finished build again: a new build in which the other jobs keep their
    results."""
    build = get_build(session, build_id)
    job = session.get(Job, job_id)
    if job is None or job.build_id != build.id:
        raise NotFound(f"build {build_id} has no job {job_id}")
    with quotas.admission(session, state.settings):
        new = reruns.rerun_job(session, state.reactions, build, job)
        session.commit()
    log.info("event=job_rerun build=%s of=%s job=%s", new.id, build_id, job_id)
    state.wake.queue_changed()
    return BuildAccepted(build_id=new.id, url=f"/builds/{new.id}")


@router.get(
    "/{build_id}/logs",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
def read_build_logs(
    session: SessionDep,
    settings: SettingsDep,
    build_id: IdPath,
    job: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    stage: Stage | None = None,
) -> PlainTextResponse:
    """Every stage's runner log as text, each under a heading line (``job``, ``stage``: only
    those)."""
    report = stored_reports.current(session, get_build(session, build_id), settings)
    entries = logs.views(report, logs.of_build(session, build_id))
    entries = [
        e
        for e in entries
        if (job is None or e.job_id == job) and (stage is None or e.stage == stage.value)
    ]
    return PlainTextResponse("".join(logs.as_text(entries)))


@router.get(
    "/{build_id}/wheel",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}},
)
def download_build_wheel(session: SessionDep, settings: SettingsDep, build_id: IdPath) -> Response:
    """The build's wheel (an upload's, or the one built from its commit), under its file name."""
    build = get_build(session, build_id)
    if build.sha256 is None or build.filename is None:
        raise NotFound(f"build {build_id} has no wheel (yet)")
    path = uploads.blob_path(settings.data_dir, build.sha256)
    if not path.is_file():
        raise NotFound(f"the wheel of build {build_id} is no longer stored")
    return FileResponse(path, filename=build.filename, media_type="application/octet-stream")
