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
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from service import body_limits, db, doors, headers, openapi
from service.api import bisections, builds, jobs, pins, runners, validate, webhooks
from service.config import Settings, private_dir
from service.deps import SessionDep, open_session, session_maker
from service.errors import ApiError
from service.jobs import bisection_runs, queue, wake
from service.leader import Leader
from service.outbound import github, notifications
from service.uploads import blobsweep, client_limits, uploads
from service.web import apidocs, views

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


async def _sweeper(app: FastAPI) -> None:
    settings: Settings = app.state.settings
    while True:
        await asyncio.sleep(settings.sweep_interval_s)
        try:
            if not await asyncio.to_thread(app.state.leader.holds):
                continue  # another replica does the periodic work
            changed = await asyncio.to_thread(_sweep_once, app)
            if changed:
                wake.queue_changed(app)
            app.state.bisect.kick()  # also picks up what a restart interrupted
            app.state.notifier.kick()  # notifications due again, or left by a restart
            app.state.github.kick()  # statuses due again, or left by another process
        except Exception:
            log.exception("event=sweep_failed")


def _sweep_once(app: FastAPI) -> int:
    with open_session(app) as session:
        changed = queue.sweep(session)
        session.commit()
        return changed


async def _blob_sweeper(app: FastAPI) -> None:
    """Its own loop: it only reads the database, so a writer holding the lock never stalls it."""
    settings: Settings = app.state.settings
    while True:
        await asyncio.sleep(settings.sweep_interval_s)
        try:
            if not await asyncio.to_thread(app.state.leader.holds):
                continue
            await asyncio.to_thread(_sweep_blobs, session_maker(app), settings, "periodic")
        except Exception:
            log.exception("event=blob_sweep_failed")


def _sweep_blobs(sessions: sessionmaker[Session], settings: Settings, where: str) -> None:
    with sessions() as session:
        blobsweep.sweep_orphans(session, settings.data_dir, settings.orphan_grace_s, where=where)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = (settings or Settings()).with_generated_tokens()
    private_dir(settings.data_dir)
    db.migrate(settings.url)
    engine = db.make_engine(settings.url)
    uploads.sweep_tmp(settings.data_dir)
    sessions = db.session_factory(engine)
    sessions.configure(info={"settings": settings})  # the report reads FE_CI_REQUIRE
    _sweep_blobs(sessions, settings, "startup")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tasks = [*wake.start(app, engine)]
        tasks += [asyncio.create_task(_sweeper(app)), asyncio.create_task(_blob_sweeper(app))]
        if settings.watch:  # imported here: httpx only where something is fetched or posted
            from service.watch import releases

            watcher = releases.Watcher(settings, sessions, lambda: wake.queue_changed(app))
            tasks.append(asyncio.create_task(releases.run(watcher, app.state.leader)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            wake.stop(app)
            app.state.github.close()
            await asyncio.to_thread(app.state.leader.release)
            engine.dispose()

    app = FastAPI(title="fe-ci", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.settings = settings
    doors.install(app)  # innermost: a token is checked from the headers before the route runs
    body_limits.install(app)  # so the body deadline wraps what it reads
    client_limits.install(app, settings)
    app.add_middleware(headers.HeadAndHeaders)
    app.state.engine = engine
    app.state.sessions = sessions  # deps.open_session and deps.session_maker read it
    app.state.leader = Leader(engine)  # which replica does the periodic work
    app.state.github = github.StatusReporter(settings)
    app.state.github.install(sessions, engine)  # the outbox of statuses, sent after commits
    app.state.notifier = notifications.Notifier(settings, sessions)
    app.state.notifier.install()
    app.state.bisect = bisection_runs.Driver(
        settings, sessions, on_queued=lambda: wake.queue_changed(app)
    )
    app.state.bisect.install()
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
