"""Bounds on what a client can hold: time to send its headers, time between body chunks, uploads
at once, connections at once.

- Headers: a connection that has not sent a complete request head within ``header_timeout_s``
  of connecting (or of its first byte after a keep-alive pause) is closed. Uvicorn's keep-alive
  timeout covers only the idle time after a response; a client that sends one header byte at a
  time, or nothing at all after connecting, was held for ever.
- Body: between two chunks of a request body at most ``body_timeout_s``; past it the request
  answers ``408 request_timeout`` and its connection is closed. Only while the body is still
  arriving: a response that waits for the client to go away (live updates) is not timed.
- Uploads: at most ``max_uploads`` wheel bodies stream at once, over the whole service (a limit
  per client address means nothing behind a proxy, and every submitter shares one token); the
  next answers ``503 too_many_uploads``.
- Connections: uvicorn's ``limit_concurrency`` (its own plain-text 503 past it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import h11
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.config import Settings
from service.errors import RequestTimeout, TooManyRequests

log = logging.getLogger("fe_ci.limits")


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of ``uvicorn.run`` that bound clients."""
    return {
        "http": header_timeout_protocol(settings.header_timeout_s),
        "limit_concurrency": settings.max_connections,
        "timeout_keep_alive": 5,
    }


def header_timeout_protocol(timeout_s: float) -> type[H11Protocol]:
    class HeaderTimeoutProtocol(H11Protocol):
        """Uvicorn's h11 protocol, closing a connection whose request head is late."""

        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE and (
                self.cycle is None or self.cycle.response_complete
            ):
                self._arm()  # a head begun (or a new one after keep-alive): not re-armed per byte
            else:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(timeout_s, self._head_late)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                log.info("event=header_timeout client=%s timeout_s=%s", self.client, timeout_s)
                self.transport.close()

    return HeaderTimeoutProtocol


class BodyTimeoutMiddleware:
    """Wraps ``receive``: while a request body is still arriving, each chunk must come within
    ``timeout_s`` or the request fails with ``RequestTimeout``."""

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app, self.timeout_s = app, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        complete = False

        async def timed_receive() -> Message:
            nonlocal complete
            if complete:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.timeout_s)
            except TimeoutError:
                log.info("event=body_timeout path=%s timeout_s=%s", scope["path"], self.timeout_s)
                raise RequestTimeout(
                    f"no part of the request body arrived for {self.timeout_s:g} s",
                    detail={"timeout_s": self.timeout_s},
                ) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                complete = True
            return message

        await self.app(scope, timed_receive, send)


@contextlib.contextmanager
def upload_slot(request: Request) -> Iterator[None]:
    """Hold one of the service's upload slots while a wheel body streams and is checked."""
    state = request.app.state
    limit: int = state.settings.max_uploads
    if state.uploads_in_flight >= limit:
        log.info("event=upload_refused reason=too_many limit=%s", limit)
        raise TooManyRequests(
            f"{limit} uploads are already streaming; retry in a few seconds",
            detail={"max_uploads": limit},
        )
    state.uploads_in_flight += 1
    try:
        yield
    finally:
        state.uploads_in_flight -= 1
