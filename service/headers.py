"""HEAD on every GET route, and the headers every response and every page carries.

- HEAD: load balancers and health checks use it. A HEAD request is served as the GET it names,
  with the same status and headers and no body (FastAPI's routes answered 405).
- ``X-Content-Type-Options: nosniff`` on every response; on HTML pages also
  ``X-Frame-Options: DENY`` and a Content-Security-Policy that allows only the service's own
  scripts, styles, images and connections (the dashboard's scripts are ``/static/live.js`` and
  ``/static/controls.js``; inline ``style`` attributes colour the trend keys and charts). The API
  docs pages load their own inline script and are left without the policy.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
_NO_POLICY = ("/docs", "/redoc")


class HeadAndHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = scope["method"] == "HEAD"
        if head:
            scope = {**scope, "method": "GET"}
        policy = not str(scope["path"]).startswith(_NO_POLICY)
        finished = False

        async def send_with_headers(message: Message) -> None:
            nonlocal finished
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                if headers.get("content-type", "").startswith("text/html"):
                    headers.setdefault("X-Frame-Options", "DENY")
                    if policy:
                        headers.setdefault("Content-Security-Policy", CSP)
                await send(message)
            elif message["type"] == "http.response.body" and head:
                if not finished:  # the headers as GET's, then no body
                    finished = True
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await send(message)

        await self.app(scope, receive, send_with_headers)
