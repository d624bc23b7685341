"""Request dependencies: the app's state and settings, the one session per request, and who is
calling; and ``open_session``, the one way to a session outside a request's own."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette

from service import state
from service.config import Settings
from service.errors import Forbidden, Unauthorized
from service.jobs.queue import hash_token
from service.models import Runner, utcnow
from service.state import ServiceState


def get_state(request: Request) -> ServiceState:
    return state.of(request.app)


def get_settings(request: Request) -> Settings:
    return state.of(request.app).settings


def session_maker(app: Starlette) -> sessionmaker[Session]:
    """The app's session factory (set by ``create_app``), for work that opens its own sessions."""
    return state.of(app).sessions


def open_session(app: Starlette) -> Session:
    """A session of its own, ``with open_session(app) as session:``: for what a request does in a
    worker thread (each try of a long poll, an upload's record once its body is in) and for the
    app's loops. A route's one session is ``SessionDep``."""
    return session_maker(app)()


def get_db(request: Request) -> Iterator[Session]:
    with open_session(request.app) as session:
        yield session


StateDep = Annotated[ServiceState, Depends(get_state)]
SettingsDep = Annotated[Settings, Depends(get_settings)]

# Row ids are INTEGER columns: 32 bits on Postgres, 64 on SQLite. A larger id in a URL is refused
# as invalid (422) instead of overflowing the database driver (a 500).
MAX_ID = 2**31 - 1
IdPath = Annotated[int, Path(ge=1, le=MAX_ID)]
CursorQuery = Annotated[int | None, Query(ge=1, le=MAX_ID)]
SessionDep = Annotated[Session, Depends(get_db)]


def bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("send 'Authorization: Bearer <token>'")
    return token.strip()


def same_secret(given: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def require_submitter(request: Request, settings: SettingsDep) -> str:
    """The submit token opens submission and cancellation, nothing else."""
    if not same_secret(bearer(request), settings.submit_token):
        raise Unauthorized("invalid submit token")
    return "token"


def require_registration(request: Request, settings: SettingsDep) -> None:
    """The registration token, which every runner host holds, registers a runner and only that."""
    if not same_secret(bearer(request), settings.runner_token):
        raise Unauthorized("invalid runner registration token")


def require_admin(request: Request, settings: SettingsDep) -> None:
    """The admin token opens the operator's doors (revoking and reinstating runners, re-pinning a
    comparison point), nothing else; the registration token opens none of them."""
    if not same_secret(bearer(request), settings.admin_token):
        raise Unauthorized("invalid admin token")


def require_runner(request: Request, session: SessionDep) -> Runner:
    """A runner's own token, issued at registration and stored hashed."""
    digest = hash_token(bearer(request))
    runner = session.scalars(select(Runner).where(Runner.token_hash == digest)).first()
    if runner is None or not hmac.compare_digest(runner.token_hash, digest):
        raise Unauthorized("invalid runner token")
    if runner.revoked_at is not None:
        raise Forbidden("this runner's token was revoked")
    runner.last_seen_at = utcnow()
    runner.offline_at = None
    return runner


SubmitterDep = Annotated[str, Depends(require_submitter)]
RunnerDep = Annotated[Runner, Depends(require_runner)]
RegistrationDep = Annotated[None, Depends(require_registration)]
AdminDep = Annotated[None, Depends(require_admin)]
