"""A job that changes state is an event; the build's report is computed here, once per event.

``job_changed`` assembles the report, stores the build's verdict (the grid reads the column),
queues a commit build's statuses and, when the build has just finished, stores the report for good
(``stored_reports``: every later reader takes it from there, never recomputing it) and tells the
listeners (the bisection driver) in the same transaction. A stage post is no event: it changes no
job's state, so no report is computed for it. ``job_started`` (a claim) computes one only where a
commit status must say the job is running.

What an event sets off beyond the report is the ``Reactions`` it is handed: the settings (the
gate's required checks, the window in which a runner counts as alive), the GitHub reporter and the
build-finished listeners (the bisection driver, the notifications outbox). ``create_app`` makes one
per app and registers the listeners on it, so nothing here imports them and nothing travels on the
session: the queue creates jobs, a bisection creates builds through the queue, and neither imports
the other through this module.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from core.wire import BuildReport
from service.config import Settings
from service.db import locks_rows
from service.jobs import refusal_reuse
from service.models import Build, utcnow
from service.outbound import github
from service.results import stored_reports
from service.results.assemble import build_report

log = logging.getLogger("fe_ci.events")

BuildFinished = Callable[[Session, Build, BuildReport], None]


@dataclass
class Reactions:
    """What a job's change of state sets off beyond its report, made once per app: the settings
    the report is judged by, the GitHub reporter (None: no statuses) and the listeners told, in
    the same transaction, that a build finished."""

    settings: Settings
    reporter: github.StatusReporter | None = None
    finished: list[BuildFinished] = field(default_factory=list)

    def listen(self, listener: BuildFinished) -> None:
        """Call ``listener(session, build, report)`` when a build finishes."""
        self.finished.append(listener)


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


def job_changed(session: Session, build_id: int, reactions: Reactions) -> BuildReport | None:
    """A job of the build was created, ended, requeued or cancelled: compute the report once."""
    build = _locked_build(session, build_id)
    if build is None:
        return None
    for job in refusal_reuse.give_back(build):  # the CPU job ended without its refusal decisions
        log.info("event=refusal_given_back build=%s job=%s", build.id, job.id)
    report = build_report(session, build, reactions.settings)
    log.debug("event=report_computed build=%s status=%s", build.id, report.status)
    if build.source == "commit" and build.commit:
        # each job's context, sent when it changed
        github.queue_statuses(session, report, reactions.reporter)
    build.verdict = report.verdict
    build.verdict_reason = report.verdict_reason
    if report.status in stored_reports.FINAL:
        if build.finished_at is None:
            build.finished_at = utcnow()
            for listener in reactions.finished:
                listener(session, build, report)
        # it can no longer change
        stored_reports.keep(session, build.id, report, reactions.settings.require)
    return report


def job_started(session: Session, build_id: int, reactions: Reactions) -> None:
    """A job was leased: only a commit build's status changes (to running)."""
    build = session.get(Build, build_id)
    if build is not None and github.wants_statuses(session, build, reactions.reporter):
        job_changed(session, build_id, reactions)
