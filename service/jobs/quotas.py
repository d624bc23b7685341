"""How many builds the submit token may have queued: past a cap, ``429 too_many_queued``.

200 reruns in 5.9 s queued 200 builds: a rerun is a new build with all its jobs, and nothing
bounded how many a token could ask for. A build counts as queued while one of its jobs is still
to run or running (``core.verdict.OPEN_JOBS``) and it is not cancelled. Two caps, checked when a
build is submitted (``POST /validate``) or rerun (``POST /api/builds/{id}/rerun`` and
``.../jobs/{id}/rerun``):

- ``FE_CI_MAX_QUEUED_PER_TOKEN``: the builds the submit token queued (its submissions and every
  rerun) that are still queued;
- ``FE_CI_MAX_QUEUED_BUILDS``: every queued build of the service (pushes and bisection steps
  included, which have their own bounds and are never refused here).

Both answer in the one error shape, with ``Retry-After``. The check and the new build's commit
happen under one lock of the process, so requests at once cannot all pass on the same count.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from core.verdict import OPEN_JOBS
from service import leader
from service.config import Settings
from service.errors import ApiError
from service.models import Build, Job

log = logging.getLogger("fe_ci.quotas")

SUBMIT_TOKEN = "token"  # what ``deps.require_submitter`` names the submit token in ``submitted_by``

OPEN_JOB_STATES = tuple(OPEN_JOBS)

_admission = threading.Lock()


class TooManyQueued(ApiError):
    code, status_code, message = "too_many_queued", 429, "too many builds queued; retry later"
    retry_after_s = 60


def queued(session: Session) -> tuple[int, int]:
    """Every queued build, and those the submit token queued."""
    running = select(Job.build_id).where(Job.state.in_(OPEN_JOB_STATES))
    still = (Build.id.in_(running), Build.cancelled_at.is_(None))
    total = session.scalar(select(func.count(Build.id)).where(*still)) or 0
    mine = session.scalar(
        select(func.count(Build.id))
        .where(*still)
        .where(or_(Build.submitted_by == SUBMIT_TOKEN, Build.rerun_of.is_not(None)))
    )
    return int(total), int(mine or 0)


@contextlib.contextmanager
def admission(session: Session, settings: Settings) -> Iterator[None]:
    """Refuse if either cap is reached; else hold the lock while the caller adds and commits its
    build (this process's, and on PostgreSQL every replica's until the transaction ends)."""
    with _admission:
        leader.hold_for_transaction(session, leader.ADMISSION)
        total, mine = queued(session)
        if mine >= settings.max_queued_per_token:
            raise _refusal("max_queued_per_token", settings.max_queued_per_token, mine)
        if total >= settings.max_queued_builds:
            raise _refusal("max_queued_builds", settings.max_queued_builds, total)
        yield


def _refusal(setting: str, limit: int, count: int) -> TooManyQueued:
    log.info("event=queue_refused %s=%s queued=%s", setting, limit, count)
    return TooManyQueued(
        f"{count} builds are already queued ({setting} is {limit}); retry when some have "
        "finished, or cancel some",
        detail={setting: limit, "queued": count},
    )
