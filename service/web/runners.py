"""``/runners``: each runner's labels, state (alive when seen within two lease periods), current job
and last heartbeat."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.wire import JobState
from service.config import Settings
from service.deps import SessionDep, SettingsDep
from service.models import Build, Job, Runner, utcnow
from service.web.templating import templates, timed

router = APIRouter(include_in_schema=False)

KNOWN_LABELS = ("arch", "gpu", "cc", "driver", "builder")


@dataclass
class CurrentJob:
    id: int
    build_id: int
    kind: str
    family: str | None
    attempt: int
    version: str | None
    lease_expires_at: datetime | None


SHOWN_JOBS = 3  # leased jobs listed per runner; the rest are counted


@dataclass
class RunnerView:
    id: int
    name: str
    labels: dict[str, str]
    state: str  # "alive" | "offline" (said it stopped) | "gone" (not seen) | "revoked"
    last_seen_at: datetime
    created_at: datetime
    jobs: list[CurrentJob]  # its oldest leased jobs, at most SHOWN_JOBS
    leased: int  # how many jobs it holds leased

    @property
    def other_labels(self) -> dict[str, str]:
        return {k: v for k, v in self.labels.items() if k not in KNOWN_LABELS}

    @property
    def more(self) -> int:
        return self.leased - len(self.jobs)


def leased_counts(session: Session) -> dict[int, int]:
    """Leased jobs per runner (a count over ``ix_jobs_state_runner_id``, no job row read)."""
    stmt = (
        select(Job.runner_id, func.count())
        .where(Job.state == JobState.leased, Job.runner_id.is_not(None))
        .group_by(Job.runner_id)
    )
    return {runner_id: n for runner_id, n in session.execute(stmt) if runner_id is not None}


def leased_jobs(session: Session, runner_id: int, limit: int = SHOWN_JOBS) -> list[CurrentJob]:
    """The runner's oldest ``limit`` leased jobs."""
    stmt = (
        select(
            Job.id,
            Job.build_id,
            Job.kind,
            Job.family,
            Job.attempt,
            Build.version,
            Job.lease_expires_at,
        )
        .join(Build, Build.id == Job.build_id)
        .where(Job.state == JobState.leased, Job.runner_id == runner_id)
        .order_by(Job.id)
        .limit(limit)
    )
    return [CurrentJob(*row) for row in session.execute(stmt)]


def runner_state(runner: Runner, since: datetime) -> str:
    if runner.revoked_at is not None:
        return "revoked"
    if runner.offline_at is not None:
        return "offline"
    return "alive" if runner.is_alive(since) else "gone"


def runner_views(session: Session, settings: Settings, now: datetime) -> list[RunnerView]:
    """Every runner with its state and leased jobs: a few queries per runner that holds a lease,
    whatever the number of builds or of jobs leased."""
    since = now - settings.alive_window
    counts = leased_counts(session)
    out = [
        RunnerView(
            id=r.id,
            name=r.name,
            labels=dict(r.labels or {}),
            state=runner_state(r, since),
            last_seen_at=r.last_seen_at,
            created_at=r.created_at,
            jobs=leased_jobs(session, r.id) if counts.get(r.id) else [],
            leased=counts.get(r.id, 0),
        )
        for r in session.scalars(select(Runner).order_by(Runner.name))
    ]
    order = {"alive": 0, "offline": 1, "gone": 2, "revoked": 3}
    return sorted(out, key=lambda v: (order[v.state], v.name))


@router.get("/runners", response_class=HTMLResponse)
def read_runners(request: Request, session: SessionDep, settings: SettingsDep) -> HTMLResponse:
    """Runners: labels, state, current job, last heartbeat."""
    started = time.perf_counter()
    now = utcnow()
    response = templates.TemplateResponse(
        request,
        "runners.html",
        {
            "runners": runner_views(session, settings, now),
            "now": now,
            "window_s": int(settings.alive_window.total_seconds()),
        },
    )
    return timed(response, started)
