"""A finished build's report is immutable: rendered once, stored, served with an ETag.

A build whose jobs have all ended (``finished`` or ``cancelled``) accepts no more results, so its
report can no longer change. It is stored when the build finishes (``events.job_changed``), or on
its first read for a build finished before this table existed, and kept in memory after that (a
bounded LRU: an entry never goes stale). ``REPORT_REVISION`` names the shape of the report and the
verdict's rules, and ``revision`` adds the required checks its gate was decided with
(``FE_CI_REQUIRE``); a stored report of another revision is computed again.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass

from fastapi import Request, Response
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core.wire import BuildReport, BuildStatus
from service.config import Settings
from service.models import Build, FinishedReport, utcnow
from service.results.assemble import build_report

log = logging.getLogger("fe_ci.stored_reports")

REPORT_REVISION = 2  # 2: the gate and the causes
MEMORY_ENTRIES = 512
FINAL = (BuildStatus.finished, BuildStatus.cancelled)


@dataclass(frozen=True)
class Rendered:
    etag: str  # quoted, as the header carries it
    body: bytes
    final: bool


def render(report: BuildReport) -> Rendered:
    body = report.model_dump_json().encode()
    etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    return Rendered(etag=etag, body=body, final=report.status in FINAL)


class _Memory:
    """Finished reports by build id, the most recently read kept."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[int, Rendered] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, build_id: int) -> Rendered | None:
        with self.lock:
            found = self.items.get(build_id)
            if found is not None:
                self.items.move_to_end(build_id)
            return found

    def put(self, build_id: int, rendered: Rendered) -> None:
        with self.lock:
            self.items[build_id] = rendered
            self.items.move_to_end(build_id)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


MEMORY = _Memory(MEMORY_ENTRIES)


def revision(require: list[str]) -> int:
    """The revision a report stored under ``require`` (``FE_CI_REQUIRE``) has: ``REPORT_REVISION``
    under the default requirement (``all``), else with a digest of the required checks in its
    upper bits."""
    if require in ([], ["all"]):
        return REPORT_REVISION
    return (REPORT_REVISION << 24) | (zlib.crc32(",".join(require).encode()) & 0xFFFFFF)


def keep(session: Session, build_id: int, report: BuildReport, require: list[str]) -> Rendered:
    """Store a final report (once; a stored one of the current revision is left as it is)."""
    rendered = render(report)
    if not rendered.final:
        return rendered
    row = session.get(FinishedReport, build_id)
    if row is None:
        row = FinishedReport(build_id=build_id)
        session.add(row)
    row.revision, row.etag, row.body = revision(require), rendered.etag, rendered.body.decode()
    row.created_at = utcnow()
    return rendered


def stored(session: Session, build_id: int, require: list[str]) -> Rendered | None:
    row = session.execute(
        select(FinishedReport.etag, FinishedReport.body).where(
            FinishedReport.build_id == build_id, FinishedReport.revision == revision(require)
        )
    ).first()
    if row is None:
        return None
    rendered = Rendered(etag=row.etag, body=row.body.encode(), final=True)
    MEMORY.put(build_id, rendered)
    return rendered


def keep_after_read(
    session: Session, build_id: int, report: BuildReport, require: list[str]
) -> Rendered:
    """On a read: store a final report that was not stored yet (a racing reader may win)."""
    rendered = keep(session, build_id, report, require)
    if rendered.final:
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
        MEMORY.put(build_id, rendered)
    return rendered


def current(session: Session, build: Build, settings: Settings) -> BuildReport:
    """The build's report as every reader sees it: once final, the stored one (never computed
    again); before that, assembled from the rows as they stand, judged by ``settings``."""
    rendered = MEMORY.get(build.id) or stored(session, build.id, settings.require)
    if rendered is not None:
        try:
            return BuildReport.model_validate_json(rendered.body)
        except ValidationError as exc:
            # Stored before the runner protocol's bounds (core/bounds.py) were what they are: a
            # text or a number they now refuse. The rows still hold it; the report they make is
            # read as stored, not validated again.
            log.info(
                "event=stored_report_reassembled build=%s errors=%s", build.id, exc.error_count()
            )
            return build_report(session, build, settings)
    report = build_report(session, build, settings)
    if report.status in FINAL:  # finished before reports were stored
        keep_after_read(session, build.id, report, settings.require)
    return report


def _matches(header: str | None, etag: str) -> bool:
    if not header:
        return False
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


def respond(request: Request, rendered: Rendered) -> Response:
    """The report, or 304 when the client holds this version (``If-None-Match``)."""
    headers = {"ETag": rendered.etag, "Cache-Control": "no-cache"}
    if _matches(request.headers.get("if-none-match"), rendered.etag):
        return Response(status_code=304, headers=headers)
    return Response(content=rendered.body, media_type="application/json", headers=headers)
