"""Builds: the list (newest first, paged by cursor), one build's report, cancellation."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session, selectinload

from core.wire import BuildReport, BuildsPage
from service import notify, queue, stored_reports
from service.assemble import build_report, summary
from service.build_list import filtered_builds
from service.deps import CursorQuery, IdPath, SessionDep, SubmitterDep
from service.errors import Conflict, NotFound
from service.models import Build

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
    source: Annotated[str | None, Query(pattern="^(wheel|commit)$")] = None,
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


def _rendered(request: Request, build_id: int) -> stored_reports.Rendered:
    session: Session
    with request.app.state.sessions() as session:
        found = stored_reports.stored(session, build_id)
        if found is not None:
            return found
        report = build_report(session, get_build(session, build_id))
        return stored_reports.keep_after_read(session, build_id, report)


@router.get(
    "/{build_id}",
    response_model=BuildReport,
    responses={304: {"description": "not modified: the client's ETag is current"}},
)
async def read_build(request: Request, build_id: IdPath) -> Response:
    """One build's full report: capabilities, findings, jobs and stages, drift, refusal.

    With an ``ETag``; a finished build's report never changes and is served as stored.
    """
    rendered = stored_reports.MEMORY.get(build_id)  # a finished report, read before: no database
    if rendered is None:
        rendered = await run_in_threadpool(_rendered, request, build_id)
    return stored_reports.respond(request, rendered)


@router.post("/{build_id}/cancel", response_model=BuildReport)
def cancel_build(
    request: Request, session: SessionDep, _submitter: SubmitterDep, build_id: IdPath
) -> BuildReport:
    """Cancel a build: queued jobs end, a running stage is stopped at its next heartbeat."""
    build = get_build(session, build_id)
    if build.finished_at is not None and build.cancelled_at is None:
        raise Conflict(f"build {build_id} already finished")
    queue.cancel_build(session, build)
    session.commit()
    notify.queue_changed(request.app)
    return stored_reports.current(session, build)
