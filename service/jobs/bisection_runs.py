"""Bisections: a red transition between two commit builds of a branch, searched to its first commit.

When a commit build of a branch finishes and something that was green on the branch's previous
build is red (``core.transitions.RULES``), a bisection is opened (``build_finished``, inside the
transaction that finished the build). The ``Driver`` does the rest off the request path: it reads
``git rev-list --ancestry-path GOOD..BAD`` from the service's own mirror, queues a commit build of
the midpoint that runs only the deciding stages, judges it when it finishes, and narrows
(``core.bisection``, the same search ``fe-ci bisect`` runs) until it names the first bad commit,
or a range, or the cap is reached. Step builds carry ``bisection_id``: GitHub hears nothing of them
(``service.outbound.github``) and no line compares against them
(``service.results.feature_regression``). A newer push does not cancel a bisection; ``cancel`` does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import event, select
from sqlalchemy.orm import Session, sessionmaker

from core import commits as git
from core.bisection import Answer, Mark, Search, Step
from core.transitions import Question, detect, judge, observe
from core.verdict import ENDED_WELL
from core.wire import BuildReport, Stage
from service import leader
from service.config import Settings
from service.jobs import queue
from service.models import Bisection, BisectionStep, Build, utcnow
from service.results import events, stored_reports

log = logging.getLogger("fe_ci.bisect")

KICK_KEY = "fe_ci_bisect_kick"
OPEN, RUNNING, FINISHED, CANCELLED, FAILED = "opening", "running", "finished", "cancelled", "failed"


def previous_on_branch(session: Session, build: Build) -> Build | None:
    """The newest earlier finished build of the branch that is not a bisection step."""
    return session.scalars(
        select(Build)
        .where(Build.source == "commit", Build.branch == build.branch, Build.id < build.id)
        .where(Build.bisection_id.is_(None), Build.cancelled_at.is_(None))
        .where(Build.finished_at.is_not(None))
        .order_by(Build.id.desc())
    ).first()


def build_finished(session: Session, settings: Settings, build: Build, report: BuildReport) -> None:
    """A build just finished: a step's result goes to the driver; a branch build may open one."""
    if build.bisection_id is not None:
        session.info[KICK_KEY] = True
        return
    if build.source != "commit" or not build.branch or not build.commit or not build.repo:
        return
    if build.cancelled_at is not None:
        return
    prev = previous_on_branch(session, build)
    if prev is None or not prev.commit or prev.commit == build.commit:
        return
    questions = detect(stored_reports.current(session, prev, settings), report)
    if not questions:
        return
    taken = session.scalars(select(Bisection).where(Bisection.bad_build_id == build.id)).first()
    if taken is not None:
        return
    session.add(
        Bisection(
            repo=build.repo,
            branch=build.branch,
            good_build_id=prev.id,
            bad_build_id=build.id,
            good_commit=prev.commit,
            bad_commit=build.commit,
            question=questions[0].model_dump(mode="json"),
            state=OPEN,
            max_builds=0,  # the driver sets the configured cap when it opens it
            commits=[],
            candidates=[],
        )
    )
    session.info[KICK_KEY] = True
    log.info(
        "event=bisection_opened good=%s bad=%s question=%r",
        prev.id,
        build.id,
        questions[0].summary(),
    )


def question_of(bisection: Bisection) -> Question:
    return Question.model_validate(bisection.question)


def _skip_detail(question: Question, report: BuildReport) -> str:
    """Why a step answered nothing: the first stage on its way that did not end well."""
    wanted = [Stage.build, *question.stages]
    for job in report.jobs:
        for stage in job.stages:
            if stage.name in wanted and stage.status not in ENDED_WELL:
                return f"{stage.name.value} {stage.status.value}: {stage.reason}"[:300]
    for job in report.jobs:
        if job.reason:
            return job.reason[:300]
    return "the deciding check did not run"


class Driver:
    """Moves bisections on, one pump at a time, in its own thread (git and the queue, never a
    request)."""

    def __init__(
        self,
        reactions: events.Reactions,
        sessions: sessionmaker[Session],
        on_queued: Callable[[], None],
    ) -> None:
        self.reactions = reactions
        self.settings = reactions.settings
        self.sessions = sessions
        self.on_queued = on_queued
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bisect")

    def install(self) -> None:
        """Pump after a transaction of these sessions that opened or moved a bisection."""
        event.listen(self.sessions, "after_commit", self._after_commit)

    def build_finished(self, session: Session, build: Build, report: BuildReport) -> None:
        """The listener ``create_app`` registers on its ``events.Reactions``."""
        build_finished(session, self.settings, build, report)

    def _after_commit(self, session: Session) -> None:
        if session.info.pop(KICK_KEY, False):
            self.kick()

    def kick(self) -> None:
        self.pool.submit(self._pump_logged)

    def _pump_logged(self) -> None:
        try:
            self.pump()
        except Exception:
            log.exception("event=bisect_pump_failed")

    @property
    def mirrors(self) -> Path:
        return self.settings.data_dir / "mirrors-cache"

    def pump(self) -> int:
        """Open new bisections and advance running ones; returns how many builds it queued."""
        queued = 0
        engine = self.sessions.kw["bind"]  # one pump at a time across replicas, too
        with self.lock, leader.exclusive(engine, leader.BISECT), self.sessions() as session:
            open_ids = session.scalars(
                select(Bisection.id).where(Bisection.state.in_((OPEN, RUNNING)))
            ).all()
            for bisection_id in open_ids:
                bisection = session.get(Bisection, bisection_id)
                if bisection is None:
                    continue
                if bisection.state == OPEN:
                    self._open(bisection)
                if bisection.state == RUNNING:
                    queued += self._advance(session, bisection)
                session.commit()
        if queued:
            self.on_queued()
        return queued

    def _mirror(self, bisection: Bisection) -> Path:
        log_path = self.mirrors / "mirror.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        git.ensure_commit(bisection.repo, bisection.good_commit, self.mirrors, log_path)
        return git.ensure_commit(bisection.repo, bisection.bad_commit, self.mirrors, log_path)

    def _open(self, bisection: Bisection) -> None:
        try:
            commits = git.ancestry_path(
                self._mirror(bisection), bisection.good_commit, bisection.bad_commit
            )
        except git.BuildFailure as exc:
            self._end(bisection, FAILED, f"cannot read the history: {exc.message}")
            return
        if not commits or commits[-1] != bisection.bad_commit:
            self._end(bisection, FAILED, "the bad commit does not descend from the good one")
            return
        bisection.commits = commits
        bisection.max_builds = self.settings.bisect_max_builds
        bisection.state = RUNNING

    def _advance(self, session: Session, bisection: Bisection) -> int:
        question = question_of(bisection)
        for step in bisection.steps:
            if step.mark is not None:
                continue
            build = session.get(Build, step.build_id) if step.build_id else None
            if build is not None and build.finished_at is None:
                return 0  # still running: nothing to decide yet
            if build is None or build.cancelled_at is not None:
                step.mark, step.detail = Mark.skip.value, "the build was cancelled"
                continue
            report = stored_reports.current(session, build, self.settings)
            mark = judge(question, report)
            step.mark = mark.value
            step.detail = observe(question, report) or _skip_detail(question, report)
        search = Search(
            tuple(bisection.commits),
            tuple(Step(s.commit, Mark(s.mark)) for s in bisection.steps if s.mark),
        )
        answer = search.done(bisection.max_builds)
        if answer is not None:
            self._finish(bisection, answer)
            return 0
        commit = search.next_commit()
        assert commit is not None
        self._queue_step(session, bisection, question, commit)
        return 1

    def _queue_step(
        self, session: Session, bisection: Bisection, question: Question, commit: str
    ) -> None:
        build = Build(
            source="commit",
            repo=bisection.repo,
            commit=commit,
            branch=bisection.branch,
            bisection_id=bisection.id,
            submitted_by=f"bisection #{bisection.id}",
        )
        session.add(build)
        only = (question.stages, question.family, question.deciding_subjects())
        queue.create_jobs(session, build, self.settings, only=only)
        queue.announce(session, build, self.reactions)
        bisection.steps.append(BisectionStep(build_id=build.id, commit=commit))
        log.info("event=bisection_step bisection=%s commit=%s", bisection.id, commit[:12])

    def _finish(self, bisection: Bisection, answer: Answer) -> None:
        bisection.outcome = answer.outcome.value
        bisection.candidates = list(answer.candidates)
        if answer.first_bad is not None:
            try:
                info = git.commit_info(self._mirror(bisection), answer.first_bad)
                bisection.first_bad = {
                    "sha": info.sha,
                    "subject": info.subject,
                    "author": info.author,
                }
            except git.BuildFailure as exc:
                bisection.first_bad = {"sha": answer.first_bad, "subject": "", "author": ""}
                log.warning("event=commit_info_failed error=%s", exc.message)
        self._end(bisection, FINISHED, answer.describe())

    def _end(self, bisection: Bisection, state: str, reason: str) -> None:
        bisection.state = state
        bisection.reason = reason
        bisection.finished_at = utcnow()
        log.info(
            "event=bisection_ended bisection=%s state=%s reason=%r", bisection.id, state, reason
        )


def cancel(session: Session, bisection: Bisection, reactions: events.Reactions) -> None:
    """End the bisection and the step builds it still runs."""
    if bisection.state not in (OPEN, RUNNING):
        return
    for step in bisection.steps:
        build = session.get(Build, step.build_id) if step.build_id else None
        if build is not None and build.finished_at is None:
            queue.cancel_build(session, build, reactions, "cancelled with its bisection")
    bisection.state = CANCELLED
    bisection.reason = "cancelled"
    bisection.finished_at = utcnow()
