"""Bisections: one search for a red transition's first bad commit, and its cancellation."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from core.transitions import Question
from service.deps import MAX_ID, IdPath, SessionDep, StateDep, SubmitterDep
from service.errors import Conflict, NotFound
from service.jobs import bisection_runs
from service.models import Bisection, BisectionStep, Build
from service.openapi import errors

router = APIRouter(prefix="/api/bisections", tags=["bisections"])


class BisectionEnd(BaseModel):
    build_id: int | None
    commit: str
    url: str | None


class BisectionStepPublic(BaseModel):
    commit: str
    build_id: int | None
    url: str | None
    mark: str | None  # good | bad | skip; None while its build runs
    verdict: str  # what the deciding check showed, or why it answered nothing
    build_status: str | None


class FirstBad(BaseModel):
    sha: str
    subject: str
    author: str


class BisectionAnswer(BaseModel):
    outcome: str  # found | range | capped
    sentence: str
    candidates: list[str]
    first_bad: FirstBad | None
    repro: str  # the deciding check for the first bad commit (or the newest candidate)


class BisectionPublic(BaseModel):
    id: int
    url: str
    state: str  # opening | running | finished | cancelled | failed
    reason: str
    repo: str
    branch: str
    good: BisectionEnd
    bad: BisectionEnd
    question: Question
    summary: str
    commits: int  # on the ancestry path GOOD..BAD, BAD included
    max_builds: int
    builds_used: int
    steps: list[BisectionStepPublic]
    answer: BisectionAnswer | None
    created_at: datetime
    finished_at: datetime | None


def _end(build_id: int | None, commit: str) -> BisectionEnd:
    return BisectionEnd(
        build_id=build_id, commit=commit, url=f"/builds/{build_id}" if build_id else None
    )


def bisection_public(session: Session, b: Bisection) -> BisectionPublic:
    question = bisection_runs.question_of(b)
    steps = []
    for s in b.steps:
        build = session.get(Build, s.build_id) if s.build_id else None
        status = None
        if build is not None:
            status = "finished" if build.finished_at else "running"
            status = "cancelled" if build.cancelled_at else status
        steps.append(
            BisectionStepPublic(
                commit=s.commit,
                build_id=s.build_id,
                url=f"/builds/{s.build_id}" if s.build_id else None,
                mark=s.mark,
                verdict=s.detail or "running",
                build_status=status,
            )
        )
    answer = None
    if b.outcome:
        first = FirstBad.model_validate(b.first_bad) if b.first_bad else None
        pick = first.sha if first else b.candidates[-1]
        answer = BisectionAnswer(
            outcome=b.outcome,
            sentence=b.reason,
            candidates=b.candidates,
            first_bad=first,
            repro=question.repro(pick, b.repo),
        )
    return BisectionPublic(
        id=b.id,
        url=f"/bisections/{b.id}",
        state=b.state,
        reason=b.reason,
        repo=b.repo,
        branch=b.branch,
        good=_end(b.good_build_id, b.good_commit),
        bad=_end(b.bad_build_id, b.bad_commit),
        question=question,
        summary=question.summary(),
        commits=len(b.commits),
        max_builds=b.max_builds,
        builds_used=len(b.steps),
        steps=steps,
        answer=answer,
        created_at=b.created_at,
        finished_at=b.finished_at,
    )


def of_build(session: Session, build: Build) -> Bisection | None:
    """The bisection a build belongs to: its own red transition's, or the one it is a step of."""
    if build.bisection_id is not None:
        return session.get(Bisection, build.bisection_id)
    return session.scalars(select(Bisection).where(Bisection.bad_build_id == build.id)).first()


def get_bisection(session: Session, bisection_id: int) -> Bisection:
    found = session.get(Bisection, bisection_id)
    if found is None:
        raise NotFound(f"no bisection {bisection_id}")
    return found


class BisectionsPage(BaseModel):
    items: list[BisectionPublic]


@router.get("", response_model=BisectionsPage)
def read_bisections(
    session: SessionDep, build: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None
) -> BisectionsPage:
    """Bisections, newest first (at most 50); ``build`` keeps those of that build (red or step)."""
    stmt = select(Bisection).order_by(Bisection.id.desc()).limit(50)
    if build is not None:
        steps = select(BisectionStep.bisection_id).where(BisectionStep.build_id == build)
        stmt = stmt.where(or_(Bisection.bad_build_id == build, Bisection.id.in_(steps)))
    return BisectionsPage(items=[bisection_public(session, b) for b in session.scalars(stmt)])


@router.get("/{bisection_id}", response_model=BisectionPublic)
def read_bisection(session: SessionDep, bisection_id: IdPath) -> BisectionPublic:
    """One bisection: the question, each step (commit, verdict, build) and the answer."""
    return bisection_public(session, get_bisection(session, bisection_id))


@router.post("/{bisection_id}/cancel", response_model=BisectionPublic, responses=errors(409))
def cancel_bisection(
    state: StateDep, session: SessionDep, _submitter: SubmitterDep, bisection_id: IdPath
) -> BisectionPublic:
    """Cancel a bisection and the step builds it still runs (submit token)."""
    found = get_bisection(session, bisection_id)
    if found.state not in (bisection_runs.OPEN, bisection_runs.RUNNING):
        raise Conflict(f"bisection {bisection_id} is already {found.state}")
    with state.bisect.lock:  # the driver does not queue a step meanwhile
        session.refresh(found)
        bisection_runs.cancel(session, found, state.reactions)
        session.commit()
    state.wake.queue_changed()
    return bisection_public(session, found)
