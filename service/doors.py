"""Every token is checked before a byte of the request body is read, on every route that takes one.

FastAPI reads and parses a route's body before it runs the route's dependencies, so a token
dependency alone let anyone without a token make the service read and parse a body: four
unauthenticated 10 MB bodies to ``POST /api/pins/...`` took the service from 104 MB to 1,177 MB
of RSS before each answered 401. This middleware finds, for each request, the route that will
answer it; if that route depends on a token (``DOORS``: the submit, registration, admin or a
runner's own token, found anywhere in its dependency tree), the token is checked from the headers
alone, by the same function the route depends on, before the route is called. A refusal is the
one error shape, with the connection closed when a body was announced (it is never read).

The table is built from the app's routes on its first request, so a route added to the code
later is guarded as soon as it declares its door; ``guarded_routes`` lists them (the test walks
every one). The route's own dependency still runs after it: the check here only comes first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
from fastapi import FastAPI, routing
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from service import deps
from service.errors import ApiError

log = logging.getLogger("fe_ci.doors")

Door = Callable[..., Any]


def _check_runner(request: Request) -> None:
    with deps.open_session(request.app) as session:
        deps.require_runner(request, session)  # its last-seen stamp is not committed here
        session.rollback()


def _check_submitter(request: Request) -> None:
    deps.require_submitter(request, deps.get_settings(request))


def _check_registration(request: Request) -> None:
    deps.require_registration(request, deps.get_settings(request))


def _check_admin(request: Request) -> None:
    deps.require_admin(request, deps.get_settings(request))


# Each door's dependency, and how to check it from a request that has only its headers.
DOORS: dict[Door, Callable[[Request], None]] = {
    deps.require_submitter: _check_submitter,
    deps.require_registration: _check_registration,
    deps.require_admin: _check_admin,
    deps.require_runner: _check_runner,
}


def door_of(route: Any) -> Door | None:
    """The token dependency anywhere in the route's dependency tree, or None."""
    dependant = getattr(route, "dependant", None)
    pending = list(dependant.dependencies) if dependant is not None else []
    while pending:
        dep = pending.pop()
        if dep.call in DOORS:
            return dep.call
        pending.extend(dep.dependencies)
    return None


def routes_in_order(app: FastAPI) -> list[Any]:
    """Every route the app's router tries, in its order, with its full path (a FastAPI that
    keeps included routers apart gives each route's context, which matches and knows its
    dependencies as the router sees them)."""
    contexts = getattr(routing, "iter_route_contexts", None)
    if contexts is None:  # an older FastAPI: included routes are copied into app.routes
        return list(app.routes)
    return list(contexts(app.routes))


def guarded_routes(app: FastAPI) -> list[tuple[Any, Door]]:
    """Every route of the app that takes a token, with its door."""
    out = []
    for route in routes_in_order(app):
        door = door_of(route)
        if door is not None:
            out.append((route, door))
    return out


def door_for(table: list[tuple[Any, Door | None]], scope: Scope) -> Door | None:
    """The door of the route that will answer ``scope``: the first one that matches it fully, as
    the router chooses."""
    for route, door in table:
        if route.matches(scope)[0] is Match.FULL:
            return door
    return None


class TokenFirst:
    """The ASGI middleware: the matched route's door, checked from the headers, before the app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._table: list[tuple[Any, Door | None]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._table is None:
            self._table = [(r, door_of(r)) for r in routes_in_order(scope["app"])]
        door = door_for(self._table, scope)
        if door is not None:
            request = Request(scope)  # the headers only: it has no way to the body
            try:
                if door is deps.require_runner:
                    await anyio.to_thread.run_sync(DOORS[door], request)
                else:
                    DOORS[door](request)
            except ApiError as refusal:
                log.info("event=door_refused path=%s code=%s", scope["path"], refusal.code)
                await _answer(refusal, scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _answer(error: ApiError, scope: Scope, receive: Receive, send: Send) -> None:
    headers = error.headers()
    if _announces_body(scope):
        headers["Connection"] = "close"  # the body is never read; the client may still be sending
    response = JSONResponse(error.body(), status_code=error.status_code, headers=headers)
    await response(scope, receive, send)


def _announces_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


def install(app: FastAPI) -> None:
    app.add_middleware(TokenFirst)
