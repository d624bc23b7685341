"""``/runners``: each runner's labels, state (alive when seen within two lease periods), current job
and last heartbeat."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from runner.wire import JobState
from service.config import Settings
from service.deps import SessionDep, SettingsDep
from service.models import Build, Job, Runner, utcnow
from service.web.queries import lease_window
from service.web.templating import templates

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


@dataclass
class RunnerView:
    id: int
    name: str
    labels: dict[str, str]
    state: str  # "alive" | "offline" (said it stopped) | "gone" (not seen) | "revoked"
    last_seen_at: datetime
    created_at: datetime
    jobs: list[CurrentJob]

    @property
    def other_labels(self) -> dict[str, str]:
        return {k: v for k, v in self.labels.items() if k not in KNOWN_LABELS}


def runner_views(session: Session, settings: Settings, now: datetime) -> list[RunnerView]:
    since = now - lease_window(settings)
    current: dict[int, list[CurrentJob]] = {}
    leased = (
        select(
            Job.runner_id,
            Job.id,
            Job.build_id,
            Job.kind,
            Job.family,
            Job.attempt,
            Build.version,
            Job.lease_expires_at,
        )
        .join(Build, Build.id == Job.build_id)
        .where(Job.state == JobState.leased, Job.runner_id.is_not(None))
    )
    for runner_id, job_id, build_id, kind, family, attempt, version, expires in session.execute(
        leased
    ):
        job = CurrentJob(job_id, build_id, kind, family, attempt, version, expires)
        current.setdefault(runner_id or 0, []).append(job)
    out = []
    for r in session.scalars(select(Runner).order_by(Runner.name)):
        if r.revoked_at is not None:
            state = "revoked"
        elif r.offline_at is not None:
            state = "offline"
        else:
            state = "alive" if r.last_seen_at >= since else "gone"
        out.append(
            RunnerView(
                id=r.id,
                name=r.name,
                labels=dict(r.labels or {}),
                state=state,
                last_seen_at=r.last_seen_at,
                created_at=r.created_at,
                jobs=current.get(r.id, []),
            )
        )
    order = {"alive": 0, "offline": 1, "gone": 2, "revoked": 3}
    return sorted(out, key=lambda v: (order[v.state], v.name))


@router.get("/runners", response_class=HTMLResponse)
def read_runners(request: Request, session: SessionDep, settings: SettingsDep) -> HTMLResponse:
    """Runners: labels, state, current job, last heartbeat."""
    now = utcnow()
    return templates.TemplateResponse(
        request,
        "runners.html",
        {
            "runners": runner_views(session, settings, now),
            "now": now,
            "window_s": 2 * settings.lease_seconds,
        },
    )
