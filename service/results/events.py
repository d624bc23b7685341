"""A job that changes state is an event; the build's report is computed here, once per event.

``job_changed`` assembles the report, stores the build's verdict (the grid reads the column),
queues a commit build's statuses and, when the build has just finished, stores the report for good
(``stored_reports``: every later reader takes it from there, never recomputing it) and tells the
listeners (the bisection driver) in the same transaction. A stage post is no event: it changes no
job's state, so no report is computed for it. ``job_started`` (a claim) computes one only where a
commit status must say the job is running.

Listeners are registered on the session factory (``listen``), so each app has its own and nothing
here imports them: the queue creates jobs, a bisection creates builds through the queue, and
neither imports the other through this module.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from core.wire import BuildReport
from service.db import locks_rows
from service.jobs import refusal_reuse
from service.models import Build, utcnow
from service.outbound import github
from service.results import stored_reports
from service.results.assemble import build_report

log = logging.getLogger("fe_ci.events")

FINISHED_LISTENERS = "fe_ci_build_finished"
BuildFinished = Callable[[Session, Build, BuildReport], None]


def listen(sessions: sessionmaker[Session], listener: BuildFinished) -> None:
    """Call ``listener(session, build, report)`` when a build of these sessions finishes."""
    info = dict(sessions.kw.get("info") or {})
    info[FINISHED_LISTENERS] = [*info.get(FINISHED_LISTENERS, ()), listener]
    sessions.configure(info=info)


def _locked_build(session: Session, build_id: int) -> Build | None:
    session.flush()
    if locks_rows(session):
        # Two jobs of one build finishing at once: without the lock each transaction reads the
        # other's job as still running and the build keeps `pending` for ever. Waiting for the
        # build row serialises them; each statement after it reads what the other committed,
        # so drop what this session loaded before the wait.
        build = session.get(Build, build_id, with_for_update=True)
        session.expire_all()
    else:
        build = session.get(Build, build_id)
    if build is not None:
        session.expire(build)
    return build


def job_changed(session: Session, build_id: int) -> BuildReport | None:
    """A job of the build was created, ended, requeued or cancelled: compute the report once."""
    build = _locked_build(session, build_id)
    if build is None:
        return None
    for job in refusal_reuse.give_back(build):  # the CPU job ended without its refusal decisions
        log.info("event=refusal_given_back build=%s job=%s", build.id, job.id)
    report = build_report(session, build)
    log.debug("event=report_computed build=%s status=%s", build.id, report.status)
    if build.source == "commit" and build.commit:
        github.queue_statuses(session, report)  # each job's context, sent when it changed
    build.verdict = report.verdict
    build.verdict_reason = report.verdict_reason
    if report.status in stored_reports.FINAL:
        if build.finished_at is None:
            build.finished_at = utcnow()
            for listener in session.info.get(FINISHED_LISTENERS, ()):
                listener(session, build, report)
        stored_reports.keep(session, build.id, report)  # it can no longer change
    return report


def job_started(session: Session, build_id: int) -> None:
    """A job was leased: only a commit build's status changes (to running)."""
    build = session.get(Build, build_id)
    if build is not None and build.source == "commit" and github.wants_statuses(session, build):
        job_changed(session, build_id)
