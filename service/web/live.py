"""Live status of a build: a small JSON snapshot, streamed as server-sent events while it runs.

The snapshot carries the build's status and verdict and one progress line per job (each stage's
state in the job's order); the page renders the same snapshot server-side, so it reads the same
without JavaScript, and ``static/live.js`` updates it in place from the stream.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.types import Receive, Scope, Send

from service import state
from service.config import Settings
from service.deps import IdPath, SessionDep, SettingsDep, open_session
from service.errors import NotFound
from service.models import Build, utcnow
from service.results.assemble import status_of
from service.web import live_hub
from service.web.cells import job_cell, job_stage_cell, verdict_cell
from service.web.queries import alive, load_jobs

router = APIRouter(include_in_schema=False)

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
        word = job_cell(job, families)
        out_jobs.append(
            {
                "id": job.id,
                "label": f"{job.label} job {job.id}",
                "state": word.state,  # the one word (core.wire.job_word), as the report's shown
                "reason": word.reason,
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
        return snapshot(session, state.of(app).settings, build_id, utcnow())


def _take(app: FastAPI, build_ids: list[int]) -> dict[int, dict[str, Any] | None]:
    """The hub's poll: every watched build's snapshot in one session (None: the build is gone)."""
    out: dict[int, dict[str, Any] | None] = {}
    now = utcnow()
    settings = state.of(app).settings
    with open_session(app) as session:
        for build_id in build_ids:
            try:
                out[build_id] = snapshot(session, settings, build_id, now)
            except NotFound:
                out[build_id] = None
            session.expire_all()
    return out


@router.get("/builds/{build_id}/live.json")
def read_live_status(
    session: SessionDep, settings: SettingsDep, build_id: IdPath
) -> dict[str, Any]:
    """The build's status, verdict and per-stage progress, for a poll."""
    return snapshot(session, settings, build_id, utcnow())


async def _events(
    request: Request, hub: live_hub.Hub, build_id: int, first: dict[str, Any]
) -> AsyncIterator[str]:
    sent = ""
    quiet_since = started = time.monotonic()
    snap, body = first, json.dumps(first, sort_keys=True)
    while True:
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
        await hub.wait(KEEPALIVE_S / 3)
        latest, latest_body = hub.current(build_id)
        if latest is None:
            return  # the build is gone
        snap, body = latest, latest_body


class _HeldStream(StreamingResponse):
    """A stream that gives back its slot and its watch however it ends."""

    def __init__(self, content: AsyncIterator[str], held: contextlib.ExitStack, **kw: Any) -> None:
        super().__init__(content, **kw)
        self.held = held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with self.held:
            await super().__call__(scope, receive, send)


@router.get("/builds/{build_id}/events")
async def stream_build_events(request: Request, build_id: IdPath) -> StreamingResponse:
    """Server-sent events: a ``snapshot`` event whenever the build's status changes (at most
    ``FE_CI_MAX_STREAMS`` open, ``FE_CI_MAX_STREAMS_PER_CLIENT`` per client: ``service/web/
    live_hub.py``)."""
    app = request.app
    found = state.of(app)
    with contextlib.ExitStack() as held:
        held.enter_context(found.live_slots.hold(request))
        if found.live_hub is None:  # the first stream, inside the running loop
            found.live_hub = live_hub.Hub(app, _take)
        hub = found.live_hub
        first, _body = hub.current(build_id)
        if first is None:
            first = await run_in_threadpool(_snapshot_now, app, build_id)
        hub.watch(build_id, first)
        held.callback(hub.unwatch, build_id)
        response = _HeldStream(
            _events(request, hub, build_id, first),
            held.pop_all(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return response
