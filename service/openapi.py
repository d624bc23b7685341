"""The OpenAPI document: the one error shape as a schema, every 4xx a route answers, and the three
bearer tokens as security schemes (so ``/docs`` has an Authorize button that works).

Routes declare the errors particular to them (``responses=errors(409)``); ``install`` adds what
follows from a route's shape: 422 (a request that does not validate; FastAPI's own schema for it
is replaced, since this service answers it in the one error shape), 404 for a path with an id,
401 for a door with a token, 403 for a runner's (a revoked token; a job leased to another).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI, routing
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel

from service import body_limits, deps


class ErrorDetail(BaseModel):
    code: str  # stable, for programs: "not_found", "upload_too_large", ...
    message: str  # for people
    detail: Any = None  # more, where there is more: the fields that did not validate, ...


class ErrorResponse(BaseModel):
    """Every error of this service, whatever its status."""

    error: ErrorDetail


DESCRIPTIONS = {
    400: "bad request (the message says what is wrong)",
    401: "missing or invalid token",
    403: "this token does not open this door",
    404: "no such resource",
    408: "the request body stopped arriving",
    409: "conflict with the resource's state",
    413: "the request body exceeds its limit",
    422: "the request does not validate, or the upload is not a valid frontend wheel",
    429: "too many builds queued (FE_CI_MAX_QUEUED_PER_TOKEN or _BUILDS); retry later",
    503: "too many uploads at once; retry later",
}

SECURITY_SCHEMES: dict[str, dict[str, str]] = {
    "submit": {
        "type": "http",
        "scheme": "bearer",
        "description": "FE_CI_SUBMIT_TOKEN: submit, cancel and rerun builds, cancel bisections",
    },
    "runner": {
        "type": "http",
        "scheme": "bearer",
        "description": "FE_CI_RUNNER_TOKEN to register a runner; then the runner's own token "
        "(issued at registration) for its jobs",
    },
    "admin": {
        "type": "http",
        "scheme": "bearer",
        "description": "FE_CI_ADMIN_TOKEN, the operator's: revoke and reinstate runners, re-pin "
        "a comparison point (the registration token, which every runner host holds, does not)",
    },
}
_DEPENDENCIES: dict[Callable[..., Any], str] = {
    deps.require_submitter: "submit",
    deps.require_runner: "runner",
    deps.require_registration: "runner",
    deps.require_admin: "admin",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: these statuses, each in the one error shape."""
    return {c: {"model": ErrorResponse, "description": DESCRIPTIONS[c]} for c in codes}


def _ref() -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}


def _api_routes(app: FastAPI) -> Iterator[tuple[str, APIRoute]]:
    """Every documented route with its full path (FastAPI keeps included routers apart)."""
    contexts = getattr(routing, "iter_route_contexts", None)
    if contexts is None:  # an older FastAPI: included routes are copied into app.routes
        found = [(getattr(r, "path", ""), r) for r in app.routes]
    else:
        found = [(c.path_format or "", c.original_route) for c in contexts(app.routes)]
    for path, route in found:
        if isinstance(route, APIRoute) and route.include_in_schema:
            yield path, route


def _door(path: str, route: APIRoute) -> str | None:
    pending = list(route.dependant.dependencies)
    while pending:
        dep = pending.pop()
        if dep.call in _DEPENDENCIES:
            return _DEPENDENCIES[dep.call]
        pending.extend(dep.dependencies)
    return None


def _add(responses: dict[str, Any], code: int) -> None:
    responses.setdefault(str(code), {"description": DESCRIPTIONS[code], "content": _ref()})


def document(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    shape = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(shape.pop("$defs", {}))
    schemas["ErrorResponse"] = shape
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    components["securitySchemes"] = SECURITY_SCHEMES
    for path, route in _api_routes(app):
        door = _door(path, route)
        for method in route.methods or ():
            op = schema["paths"].get(path, {}).get(method.lower())
            if op is None:
                continue
            responses = op.setdefault("responses", {})
            if "422" in responses:  # FastAPI's own shape for it is not what this service sends
                responses["422"] = {"description": DESCRIPTIONS[422], "content": _ref()}
            if "{" in path:
                _add(responses, 404)
            if door is not None:
                op["security"] = [{door: []}]
                _add(responses, 401)
            if door == "runner" and path != "/api/runners/register":  # a revoked runner
                _add(responses, 403)
            if method == "POST" and body_limits.limit_for(path) is not None:
                _add(responses, 413)
    return schema


def install(app: FastAPI) -> None:
    """Serve ``document(app)`` as ``/openapi.json`` (built once, on first use)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
