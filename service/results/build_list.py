"""Which builds a list shows: newest first, filtered, paged by cursor; for the API and the grid."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, select

from service.models import Build


def filtered_builds(
    *, cursor: int | None, source: str | None, branch: str | None, verdict: str | None
) -> Select[Any]:
    stmt: Select[Any] = select(Build).order_by(Build.id.desc())
    if cursor is not None:
        stmt = stmt.where(Build.id < cursor)
    if source:
        stmt = stmt.where(Build.source == source)
    if branch:
        stmt = stmt.where(Build.branch == branch)
    if verdict:
        stmt = stmt.where(Build.verdict == verdict)
    return stmt
