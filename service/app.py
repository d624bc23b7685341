"""The application factory: settings, database, routers, the one error shape, the sweeper."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from service import body_limits, db, doors, headers, openapi
from service.api import bisections, builds, jobs, pins, runners, validate, webhooks
from service.config import Settings, private_dir
from service.deps import SessionDep
from service.errors import ApiError
from service.jobs import bisection_runs, queue
from service.jobs.wake import Wake
from service.leader import Leader
from service.outbound import github, notifications
from service.results import events
from service.state import ServiceState
from service.uploads import blobsweep, client_limits, uploads
from service.web import apidocs, live_hub, views

log = logging.getLogger("fe_ci.service")

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized", 413: "too_large"}


def _error(status: int, code: str, message: str, detail: Any = None) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "detail": detail}}
    return JSONResponse(body, status_code=status)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.headers())

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        return _error(422, "validation_error", "the request is not valid", errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, _exc: ClientDisconnect) -> JSONResponse:
        # Not an error of the service: the client went away while sending. Nobody reads this.
        log.info("event=client_gone method=%s path=%s", request.method, request.url.path)
        return _error(400, "client_gone", "the client went away before the request was complete")

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("event=unhandled_error type=%s", type(exc).__name__)
        return _error(500, "internal_error", "internal error; see the service log")


async def _sweeper(state: ServiceState) -> None:
    while True:
        await asyncio.sleep(state.settings.sweep_interval_s)
        try:
            if not await asyncio.to_thread(state.leader.holds):
                continue  # another replica does the periodic work
            changed = await asyncio.to_thread(_sweep_once, state)
            if changed:
                state.wake.queue_changed()
            state.bisect.kick()  # also picks up what a restart interrupted
            state.notifier.kick()  # notifications due again, or left by a restart
            if state.reactions.reporter is not None:  # statuses due again, or another process's
                state.reactions.reporter.kick()
        except Exception:
            log.exception("event=sweep_failed")


def _sweep_once(state: ServiceState) -> int:
    with state.sessions() as session:
        changed = queue.sweep(session, state.reactions)
        session.commit()
        return changed


async def _blob_sweeper(state: ServiceState) -> None:
    """Its own loop: it only reads the database, so a writer holding the lock never stalls it."""
    settings = state.settings
    while True:
        await asyncio.sleep(settings.sweep_interval_s)
        try:
            if not await asyncio.to_thread(state.leader.holds):
                continue
            await asyncio.to_thread(_sweep_blobs, state.sessions, settings, "periodic")
        except Exception:
            log.exception("event=blob_sweep_failed")


def _sweep_blobs(sessions: sessionmaker[Session], settings: Settings, where: str) -> None:
    with sessions() as session:
        blobsweep.sweep_orphans(session, settings.data_dir, settings.orphan_grace_s, where=where)


def _state(settings: Settings, engine: Engine, sessions: sessionmaker[Session]) -> ServiceState:
    """The app's one state, and every listener registered here, where it can be seen: what a
    job's change of state sets off (the GitHub reporter, the bisection driver, the notifications
    outbox) and what each sends or starts once the transaction that asked for it commits."""
    reporter = github.StatusReporter(settings)
    reactions = events.Reactions(settings, reporter=reporter)
    wake = Wake()
    bisect = bisection_runs.Driver(reactions, sessions, on_queued=wake.queue_changed)
    notifier = notifications.Notifier(settings, sessions)
    reactions.listen(bisect.build_finished)
    if notifier.enabled:
        reactions.listen(notifier.build_finished)
    reporter.install(sessions, engine)  # the outbox of statuses, sent after commits
    bisect.install()
    notifier.install()
    return ServiceState(
        settings=settings,
        engine=engine,
        sessions=sessions,
        reactions=reactions,
        notifier=notifier,
        bisect=bisect,
        wake=wake,
        leader=Leader(engine),  # which replica does the periodic work
        held=client_limits.Held(settings),
        live_slots=live_hub.StreamSlots(settings.max_streams, settings.max_streams_per_client),
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = (settings or Settings()).with_generated_tokens()
    private_dir(settings.data_dir)
    db.migrate(settings.url)
    engine = db.make_engine(settings.url)
    uploads.sweep_tmp(settings.data_dir)
    sessions = db.session_factory(engine)
    _sweep_blobs(sessions, settings, "startup")
    state = _state(settings, engine, sessions)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tasks = state.wake.start(asyncio.get_running_loop(), engine)
        tasks += [asyncio.create_task(_sweeper(state)), asyncio.create_task(_blob_sweeper(state))]
        if settings.watch:  # imported here: httpx only where something is fetched or posted
            from service.watch import releases

            watcher = releases.Watcher(
                settings,
                sessions,
                lambda session, build: queue.announce(session, build, state.reactions),
                state.wake.queue_changed,
            )
            tasks.append(asyncio.create_task(releases.run(watcher, state.leader)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            state.wake.stop()
            if state.reactions.reporter is not None:
                state.reactions.reporter.close()
            await asyncio.to_thread(state.leader.release)
            engine.dispose()

    app = FastAPI(title="fe-ci", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    state.install(app)  # deps.StateDep and state.of read it
    doors.install(app)  # innermost: a token is checked from the headers before the route runs
    body_limits.install(app)  # so the body deadline wraps what it reads
    client_limits.install(app, settings)
    app.add_middleware(headers.HeadAndHeaders)
    install_error_handlers(app)
    app.include_router(validate.router)
    app.include_router(builds.router)
    app.include_router(runners.router)
    app.include_router(jobs.router)
    app.include_router(webhooks.router)
    app.include_router(bisections.router)
    app.include_router(pins.router)
    app.include_router(views.router)
    views.mount_static(app)
    apidocs.install_api_docs(app)
    openapi.install(app)

    @app.get("/healthz", tags=["health"])
    def healthz(session: SessionDep) -> dict[str, str]:
        """Alive and its database answering (the images' health check)."""
        session.execute(text("SELECT 1"))
        return {"status": "ok", "database": session.get_bind().dialect.name}

    return app
