"""How large a body each route reads: past it, ``413 payload_too_large``, the rest unread.

Every route has a limit: a runner's results and finish ``REPORT_BYTES``, every other route
``SMALL_BYTES`` (a registration, a heartbeat, a re-pin, a cancel or rerun, a page), except those
that read their body under their own limit: a build job's artifact and a submission
(``FE_CI_MAX_UPLOAD_MB``, and ``MAX_JSON_BYTES`` for a commit), a webhook delivery
(``FE_CI_WEBHOOK_MAX_KB``).

A runner's posts are JSON the service parses whole before it validates them; a 150 MB stage post
was read into memory (600 MB of RSS) before anything looked at it. A body that declares a larger
``Content-Length`` is refused before a byte of it is read; one sent in chunks is refused as soon
as it passes the limit. Either way the answer is the one error shape, and the connection closes
(the client is still sending). The wheel a build job uploads streams to disk under its own limit
(``FE_CI_MAX_UPLOAD_MB``) and is left alone here.
"""

from __future__ import annotations

import json
import logging
import re

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import PayloadTooLarge

log = logging.getLogger("fe_ci.body_limits")

KiB = 1024
MiB = 1024 * KiB
REPORT_BYTES = 8 * MiB  # a stage's results (every check, drift and refusal row) or the finish
SMALL_BYTES = 64 * KiB  # everything else: register, claim, heartbeat, re-pin, cancel, rerun

# The first pattern that matches a path gives its limit; None: the route keeps its own limit.
LIMITS: tuple[tuple[re.Pattern[str], int | None], ...] = (
    (re.compile(r"/api/jobs/[^/]+/artifact"), None),
    (re.compile(r"/validate"), None),
    (re.compile(r"/api/webhooks/github"), None),
    (re.compile(r"/api/jobs/[^/]+/(stages|finish)"), REPORT_BYTES),
    (re.compile(r".*", re.DOTALL), SMALL_BYTES),
)


def limit_for(path: str) -> int | None:
    for pattern, limit in LIMITS:
        if pattern.fullmatch(path):
            return limit
    return None


def install(app: FastAPI) -> None:
    """The middleware, innermost (inside the body timeout), and the answer to a chunked body."""
    app.add_middleware(BodyLimit)

    @app.exception_handler(BodyTooLarge)
    async def _too_large(_request: Request, exc: BodyTooLarge) -> JSONResponse:
        return JSONResponse(exc.error.body(), status_code=413, headers={"Connection": "close"})


class BodyTooLarge(HTTPException):
    """Raised while FastAPI reads a body (which passes an HTTPException on to its handler, and
    turns any other into a 400), answered as ``PayloadTooLarge``."""

    def __init__(self, error: PayloadTooLarge) -> None:
        super().__init__(413, detail=error.text)
        self.error = error


def _refusal(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"this route reads at most {limit} bytes of body", detail={"limit_bytes": limit}
    )


class BodyLimit:
    """The ASGI middleware: refuse a declared length at once, count a chunked one as it comes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = limit_for(scope["path"]) if scope["type"] == "http" else None
        if limit is None:
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            log.info(
                "event=body_refused path=%s declared=%s limit=%s", scope["path"], declared, limit
            )
            await _answer(send, _refusal(limit))
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    log.info(
                        "event=body_refused path=%s read=%s limit=%s", scope["path"], seen, limit
                    )
                    raise BodyTooLarge(_refusal(limit))
            return message

        await self.app(scope, counted, send)


async def _answer(send: Send, error: PayloadTooLarge) -> None:
    body = json.dumps(error.body()).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
