"""The trends page's x axis: which builds it shows (the newest that measured drift, else the
newest with stage times) and how each is named under its tick."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.models import Build, Job, StageRow, StoredDriftRow


def recent_builds(session: Session, limit: int) -> list[int]:
    """The newest builds that measured drift, oldest first (the charts' x axis)."""
    ids = session.scalars(
        select(StoredDriftRow.build_id)
        .distinct()
        .order_by(StoredDriftRow.build_id.desc())
        .limit(limit)
    )
    return sorted(ids)


def timed_builds(session: Session, limit: int) -> list[int]:
    """The newest builds with a stage that reported a duration, oldest first: the stage
    durations' axis when no build measured drift."""
    ids = session.scalars(
        select(Job.build_id)
        .join(StageRow, StageRow.job_id == Job.id)
        .distinct()
        .order_by(Job.build_id.desc())
        .limit(limit)
    )
    return sorted(ids)


def versions(session: Session, builds: list[int]) -> dict[int, str]:
    rows = session.execute(select(Build.id, Build.version).where(Build.id.in_(builds)))
    return {i: v or "?" for i, v in rows}


def axis_labels(session: Session, builds: list[int]) -> dict[int, tuple[str, str]]:
    """Per build, the x axis's two lines: its version, short (a commit build's short sha where
    it reported none), and the day it was submitted."""
    rows = session.execute(
        select(Build.id, Build.version, Build.commit, Build.created_at).where(Build.id.in_(builds))
    )
    return {
        i: (_short(v) if v else (c[:7] if c else f"#{i}"), f"{at:%b %d}" if at else "")
        for i, v, c, at in rows
    }


def _short(version: str) -> str:
    """A version short enough for the axis (about 70 px a tick): as it is up to 9 characters,
    else its release and an ellipsis (``1.37.2…`` for ``1.37.2.dev20261227+g11ab``); the whole
    of it is in the builds table below."""
    public = version.split("+", 1)[0]
    if len(public) <= 9:
        return public
    try:
        return Version(public).base_version + "…"
    except InvalidVersion:
        return public[:8] + "…"
