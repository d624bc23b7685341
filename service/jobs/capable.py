"""Which runners are alive, by what they can take, and the words for a job none of them can.

``alive`` is the one query of the runners alive (``Runner.is_alive`` is its rule for one runner
already loaded); the queue's ``auto`` families and the pages' waiting cells read it.

A queued job waits for a runner that can claim it (``queue.claim``): a ``gpu`` job for one of its
family (``arch=sm_100``) that offers its cell's cuDNN backend (``cudnn=9.28.1``, where the cell is
not the host's), a ``build`` job for a builder (``builder=1``), a ``cpu`` job for any. The build
page, its report (``JobReport.waiting``, which ``fe-ci submit --wait`` prints) and the grid's
cells say so in the same words.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import cells
from core.wire import JobKind
from service.config import Settings
from service.models import Runner

BUILDER = "builder"  # in the alive set: a builder runner is alive
ANY = "any"  # in the alive set: some runner is alive


def alive(session: Session, settings: Settings, now: datetime) -> set[str]:
    """The families of the runners alive (seen within ``Settings.alive_window``), plus
    ``BUILDER`` where one of them builds, ``ANY`` where there is one at all, and ``offers`` for
    each matrix label value a runner of a family offers."""
    since = now - settings.alive_window
    rows = session.execute(  # not DISTINCT: PostgreSQL has no equality for a JSON column
        select(Runner.family, Runner.builder, Runner.labels)
        .where(Runner.revoked_at.is_(None), Runner.offline_at.is_(None))
        .where(Runner.last_seen_at >= since)
    ).all()
    out = {family for family, _, _ in rows if family}
    if any(builder for _, builder, _ in rows):
        out.add(BUILDER)
    if rows:
        out.add(ANY)
    for family, _, labels in rows:
        if not family:
            continue
        for key in cells.AXES:
            have = str((labels or {}).get(key) or "")  # a runner without it: the host's only
            out.update(offers(family, key, v.strip()) for v in have.split("|") if v.strip())
    return out


def alive_families(session: Session, settings: Settings, now: datetime) -> list[str]:
    """The families of the runners alive, sorted (what ``FE_CI_GPU_ARCHS=auto`` covers)."""
    return sorted(f for f in alive(session, settings, now) - {BUILDER, ANY} if " " not in f)


def offers(family: str, key: str, value: str) -> str:
    """In the alive set: a runner of ``family`` offers ``key=value`` (``*``: every value)."""
    return f"{family} {key}={value}"


def waiting_reason(
    kind: str, family: str | None, alive: set[str], cell: str | None = None
) -> str | None:
    """Why a queued job of this kind (a GPU job: of this cell) waits, when no alive runner can
    take it; else None."""
    if kind == JobKind.gpu and family not in alive:
        return f"no runner with arch={family} is alive"
    if kind == JobKind.gpu and family and cell and cells.is_cell(cell):
        for key, value in cells.Cell.parse(cell).requirements.items():
            wanted = {offers(family, key, value), offers(family, key, cells.ANY_VALUE)}
            if key != cells.ARCH and not wanted & alive:
                return f"no alive {family} runner offers {key}={value}"
    if kind == JobKind.build and BUILDER not in alive:
        return "no runner with builder=1 is alive"
    if kind == JobKind.cpu and ANY not in alive:
        return "no runner is alive"
    return None
