"""The runner protocol's runner routes: register, resume after a restart, go offline, and the
operator's revoke and reinstate. What a runner does with a job is in ``jobs.py``.
"""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.subjects import FAMILIES
from core.wire import RunnerOffline, RunnerRegister, RunnerRegistered, RunnerResume, RunnerResumed
from service.config import Settings
from service.deps import (
    AdminDep,
    IdPath,
    RegistrationDep,
    RunnerDep,
    SessionDep,
    SettingsDep,
    get_state,
)
from service.errors import BadRequest, NotFound, RunnerNameInUse, RunnerRevoked
from service.jobs import queue
from service.models import Runner, utcnow
from service.openapi import errors

router = APIRouter(prefix="/api", tags=["runners"])


@router.post("/runners/register", response_model=RunnerRegistered, responses=errors(400, 403, 409))
def register_runner(
    _registration: RegistrationDep, body: RunnerRegister, session: SessionDep, settings: SettingsDep
) -> RunnerRegistered:
    """Exchange the registration token for this runner's own token (shown once, stored hashed)."""
    token = secrets.token_urlsafe(32)
    runner = session.scalars(select(Runner).where(Runner.name == body.name)).first()
    if runner is None:
        runner = Runner(name=body.name)
        session.add(runner)
    else:
        _check_name_free(runner, body.replace, settings)
    _apply_labels(runner, body.labels)
    runner.token_hash = queue.hash_token(token)
    runner.offline_at = None
    runner.last_seen_at = utcnow()
    session.commit()
    return RunnerRegistered(runner_id=runner.id, name=runner.name, token=token)


@router.post("/runners/resume", response_model=RunnerResumed)
def resume_runner(
    request: Request, body: RunnerResume, session: SessionDep, runner: RunnerDep
) -> RunnerResumed:
    """A runner restarted on its host, back under its own token; its old leases handed back."""
    _apply_labels(runner, body.labels)
    handed = _give_up_leases(request, session, runner, keep=body.holding)
    return RunnerResumed(runner_id=runner.id, name=runner.name, handed_back=handed)


@router.post("/runners/offline", status_code=204)
def runner_offline(
    request: Request, session: SessionDep, runner: RunnerDep, body: RunnerOffline | None = None
) -> Response:
    """The calling runner is stopping: offline now (its waiting claim takes nothing), and the
    leases it does not hold a result for go back to the queue."""
    runner.offline_at = utcnow()
    _give_up_leases(request, session, runner, keep=body.holding if body else [])
    return Response(status_code=204)


def _apply_labels(runner: Runner, labels: dict[str, str]) -> None:
    family = labels.get("arch") or None
    if family is not None and family not in FAMILIES:
        raise BadRequest(f"unknown arch label {family!r}; expected one of {list(FAMILIES)}")
    runner.labels, runner.family = labels, family
    runner.builder = labels.get("builder", "").lower() in ("1", "true", "yes")


def _give_up_leases(
    request: Request, session: Session, runner: Runner, keep: list[int]
) -> list[int]:
    state = get_state(request)
    handed = queue.give_up_leases(session, runner.id, set(keep), state.reactions)
    session.commit()
    if handed:
        state.wake.queue_changed()
    return handed


def _check_name_free(runner: Runner, replace: bool, settings: Settings) -> None:
    """A revoked name stays revoked; a live runner's name is taken over only on request."""
    if runner.revoked_at is not None:
        raise RunnerRevoked(
            f"runner {runner.name!r} was revoked; an operator lifts it with "
            f"POST /api/runners/{runner.id}/reinstate",
            detail={"runner_id": runner.id},
        )
    if runner.is_alive(utcnow() - settings.alive_window) and not replace:
        raise RunnerNameInUse(
            f"runner {runner.name!r} is registered and was seen at {runner.last_seen_at:%H:%M:%S}"
            f" UTC; register again once it is offline (stopped, or "
            f"{settings.alive_window.total_seconds():.0f} s "
            "unseen), or with replace (fe-ci runner --replace) to take the name over",
            detail={"runner_id": runner.id, "last_seen_at": runner.last_seen_at.isoformat()},
        )


@router.post("/runners/{runner_id}/revoke", status_code=204)
def revoke_runner(_admin: AdminDep, runner_id: IdPath, session: SessionDep) -> Response:
    """Revoke a runner's token and its name (admin token)."""
    runner = _runner(session, runner_id)
    runner.revoked_at = utcnow()
    session.commit()
    return Response(status_code=204)


@router.post("/runners/{runner_id}/reinstate", status_code=204)
def reinstate_runner(_admin: AdminDep, runner_id: IdPath, session: SessionDep) -> Response:
    """Lift a revocation (admin token): the name may register again; the revoked token stays
    dead."""
    runner = _runner(session, runner_id)
    runner.revoked_at = None
    runner.token_hash = queue.hash_token(secrets.token_urlsafe(32))  # known to nobody
    runner.offline_at = utcnow()  # with its token dead, nothing can be alive under the name
    session.commit()
    return Response(status_code=204)


def _runner(session: Session, runner_id: int) -> Runner:
    runner = session.get(Runner, runner_id)
    if runner is None:
        raise NotFound(f"no runner {runner_id}")
    return runner
