"""Which runners are alive, by what they can take, and the words for a job none of them can.

``alive`` is the one query of the runners alive (``Runner.is_alive`` is its rule for one runner
already loaded); the queue's ``auto`` families and the pages' waiting cells read it.

A queued job waits for a runner that can claim it (``queue.claim``): a ``gpu`` job for one of its
family (``arch=sm_100``), a ``build`` job for a builder (``builder=1``), a ``cpu`` job for any.
The build page, its report (``JobReport.waiting``, which ``fe-ci submit --wait`` prints) and the
grid's cells say so in the same words.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.wire import JobKind
from service.config import Settings
from service.models import Runner

BUILDER = "builder"  # in the alive set: a builder runner is alive
ANY = "any"  # in the alive set: some runner is alive


def alive(session: Session, settings: Settings, now: datetime) -> set[str]:
    """The families of the runners alive (seen within ``Settings.alive_window``), plus
    ``BUILDER`` where one of them builds and ``ANY`` where there is one at all."""
    since = now - settings.alive_window
    rows = session.execute(
        select(Runner.family, Runner.builder)
        .where(Runner.revoked_at.is_(None), Runner.offline_at.is_(None))
        .where(Runner.last_seen_at >= since)
        .distinct()
    ).all()
    out = {family for family, _ in rows if family}
    if any(builder for _, builder in rows):
        out.add(BUILDER)
    if rows:
        out.add(ANY)
    return out


def alive_families(session: Session, settings: Settings, now: datetime) -> list[str]:
    """The families of the runners alive, sorted (what ``FE_CI_GPU_ARCHS=auto`` covers)."""
    return sorted(alive(session, settings, now) - {BUILDER, ANY})


def waiting_reason(kind: str, family: str | None, alive: set[str]) -> str | None:
    """Why a queued job of this kind waits, when no alive runner can take it; else None."""
    if kind == JobKind.gpu and family not in alive:
        return f"no runner with arch={family} is alive"
    if kind == JobKind.build and BUILDER not in alive:
        return "no runner with builder=1 is alive"
    if kind == JobKind.cpu and ANY not in alive:
        return "no runner is alive"
    return None
