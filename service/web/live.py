"""Live status of a build: a small JSON snapshot, streamed as server-sent events while it runs.

The snapshot carries the build's status and verdict and one progress line per job (each stage's
state in the job's order); the page renders the same snapshot server-side, so it reads the same
without JavaScript, and ``static/live.js`` updates it in place from the stream.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from service.assemble import status_of
from service.config import Settings
from service.deps import IdPath, SessionDep, SettingsDep, open_session
from service.errors import NotFound
from service.models import Build, utcnow
from service.web.cells import job_stage_cell, verdict_cell
from service.web.queries import alive, load_jobs

router = APIRouter(include_in_schema=False)

POLL_S = 0.5  # how often a stream looks for a change
KEEPALIVE_S = 15.0
MAX_STREAM_S = 600.0  # the browser reconnects after this


def snapshot(session: Session, settings: Settings, build_id: int, now: datetime) -> dict[str, Any]:
    build = session.get(Build, build_id)
    if build is None:
        raise NotFound(f"no build {build_id}")
    jobs = load_jobs(session, [build_id]).get(build_id, [])
    families = alive(session, settings, now)
    status = status_of(cancelled=build.cancelled_at is not None, job_states=(j.state for j in jobs))
    verdict = verdict_cell(build.verdict, build.verdict_reason, jobs)
    out_jobs = []
    for job in jobs:
        stages = []
        for name in job.stages:
            cell = job_stage_cell(job, name, families)
            if cell is None:
                continue
            row = job.rows.get(name)
            stages.append(
                {
                    "name": name,
                    "state": cell.state,
                    "text": cell.text,
                    "reason": cell.reason,
                    "duration_s": round(row.duration_s, 1) if row else None,
                }
            )
        done = sum(1 for s in job.stages if s in job.rows)
        out_jobs.append(
            {
                "id": job.id,
                "label": f"{job.label} job {job.id}",
                "state": job.state,
                "runner": job.runner,
                "attempt": job.attempt,
                "done": done,
                "total": len(job.stages),
                "stages": stages,
            }
        )
    return {
        "id": build.id,
        "version": build.version,
        "status": status.value,
        "verdict": {"state": verdict.state, "text": verdict.text, "reason": verdict.reason},
        "finished": status.value in ("finished", "cancelled"),
        "jobs": out_jobs,
    }


def _snapshot_now(app: FastAPI, build_id: int) -> dict[str, Any]:
    with open_session(app) as session:
        return snapshot(session, app.state.settings, build_id, utcnow())


@router.get("/builds/{build_id}/live.json")
def read_live_status(
    session: SessionDep, settings: SettingsDep, build_id: IdPath
) -> dict[str, Any]:
    """The build's status, verdict and per-stage progress, for a poll."""
    return snapshot(session, settings, build_id, utcnow())


async def _events(request: Request, build_id: int, first: dict[str, Any]) -> AsyncIterator[str]:
    sent = ""
    quiet_since = started = time.monotonic()
    snap = first
    while True:
        body = json.dumps(snap, sort_keys=True)
        if body != sent:
            yield f"event: snapshot\ndata: {body}\n\n"
            sent, quiet_since = body, time.monotonic()
        elif time.monotonic() - quiet_since > KEEPALIVE_S:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
        if snap["finished"] or time.monotonic() - started > MAX_STREAM_S:
            return
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)
        snap = await run_in_threadpool(_snapshot_now, request.app, build_id)


@router.get("/builds/{build_id}/events")
async def stream_build_events(request: Request, build_id: IdPath) -> StreamingResponse:
    """Server-sent events: a ``snapshot`` event whenever the build's status changes."""
    first = await run_in_threadpool(_snapshot_now, request.app, build_id)
    return StreamingResponse(
        _events(request, build_id, first),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
