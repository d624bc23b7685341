"""Bounds on what a client can hold: time to send its headers, time and pace of its body, uploads
and webhook bodies at once, connections at once.

- Headers: a connection that has not sent a complete request head within ``header_timeout_s``
  of connecting (or of its first byte after a keep-alive pause) is closed. Uvicorn's keep-alive
  timeout covers only the idle time after a response; a client that sends one header byte at a
  time, or nothing at all after connecting, was held for ever.
- Body: a whole-body deadline and a minimum rate (``body_deadline_s`` plus the body's size at
  ``body_min_rate_kb``), and at most ``body_timeout_s`` between two chunks; past either the
  request answers ``408 request_timeout`` and its connection is closed. Only while the body is
  still arriving: a response that waits for the client to go away (live updates) is not timed.
- Uploads: at most ``max_uploads`` wheel bodies stream at once, over the whole service (a limit
  per client address means nothing behind a proxy, and every submitter shares one token); the
  next answers ``503 too_many_uploads``. Webhooks: at most ``max_webhooks`` bodies are read at
  once; the next answers ``503 too_many_webhooks``. Both with ``Retry-After``, and at once: a
  refused client holds no connection.
- Connections: uvicorn's ``limit_concurrency`` (its own plain-text 503 past it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import h11
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.config import Settings
from service.errors import ApiError, RequestTimeout, TooManyUploads, TooManyWebhooks

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


class BodyDeadlineMiddleware:
    """Wraps ``receive``: while a request body is still arriving it must keep to a schedule, or
    the request fails with ``RequestTimeout`` (408, the connection closed).

    The schedule is a bucket of time: it starts with ``deadline_s`` seconds, each second spent
    takes one away, each byte received adds ``1 / min_rate`` seconds, and it never holds more
    than ``deadline_s``. A body of N bytes is therefore complete within ``deadline_s + N /
    min_rate`` seconds, an upload's deadline scales with the size it declares, and a client that
    sent fast and then trickles has banked at most ``deadline_s`` seconds. Besides, no chunk may
    be later than ``idle_s`` after the previous one.

    A response started while the body is still unread (a refusal from the headers, an early
    error) closes the connection, so the rest is never drained at the client's pace.
    """

    def __init__(
        self, app: ASGIApp, *, idle_s: float, deadline_s: float, min_rate_bytes_s: float
    ) -> None:
        self.app, self.idle_s = app, idle_s
        self.deadline_s, self.min_rate = deadline_s, min_rate_bytes_s

    def total_s(self, size: int) -> float:
        """The longest a body of ``size`` bytes may take."""
        return self.deadline_s + size / self.min_rate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        start = loop.time()
        due = start + self.deadline_s  # the schedule: the body must have moved on by then
        received = 0
        complete = False
        expired: RequestTimeout | None = None
        replaced = False

        async def timed_receive() -> Message:
            nonlocal complete, due, received, expired
            if complete:
                return await receive()
            wait = min(self.idle_s, due - loop.time())
            try:
                if wait <= 0:
                    raise TimeoutError
                message = await asyncio.wait_for(receive(), wait)
            except TimeoutError:
                expired = self._expired(scope, loop.time() - start, received, wait)
                raise expired from None
            size = len(message.get("body", b""))
            received += size
            due = min(due + size / self.min_rate, loop.time() + self.deadline_s)
            if message["type"] != "http.request" or not message.get("more_body", False):
                complete = True
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal replaced
            if replaced:
                return  # the app's own answer to the expired body (FastAPI makes it a 400)
            if message["type"] == "http.response.start":
                if expired is not None:
                    replaced = True
                    await _answer(expired, scope, receive, send)
                    return
                if not complete:
                    MutableHeaders(scope=message)["Connection"] = "close"
            await send(message)

        await self.app(scope, timed_receive, guarded_send)

    def _expired(self, scope: Scope, elapsed: float, received: int, wait: float) -> RequestTimeout:
        rate_kib = self.min_rate / 1024
        detail: dict[str, Any] = {
            "received": received,
            "elapsed_s": round(elapsed, 1),
            "min_rate_kib_s": round(rate_kib, 1),
        }
        declared = _content_length(scope)
        if declared is not None:
            detail["deadline_s"] = round(self.total_s(declared), 1)
        if wait == self.idle_s:
            detail["timeout_s"] = self.idle_s
            message = f"no part of the request body arrived for {self.idle_s:g} s"
        else:
            message = (
                f"the request body arrived slower than {rate_kib:g} KiB/s: {received} bytes "
                f"in {elapsed:.0f} s"
            )
        log.info(
            "event=body_timeout path=%s received=%s elapsed_s=%.1f reason=%r",
            scope["path"],
            received,
            elapsed,
            message,
        )
        return RequestTimeout(message, detail=detail)


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.strip().isdigit():
            return int(value)
    return None


async def _answer(error: ApiError, scope: Scope, receive: Receive, send: Send) -> None:
    response = JSONResponse(error.body(), status_code=error.status_code, headers=error.headers())
    await response(scope, receive, send)


class Held:
    """What clients hold of the service at once: uploads streaming and webhook bodies being read
    (each under its cap, ``FE_CI_MAX_UPLOADS`` and ``FE_CI_MAX_WEBHOOKS``), and the limiter of the
    wheel checks running (``FE_CI_UPLOAD_CHECKS``, ``service.uploads.uploads``). One per app,
    made by ``create_app``."""

    def __init__(self, settings: Settings) -> None:
        self.max_uploads, self.max_webhooks = settings.max_uploads, settings.max_webhooks
        self.uploads = 0
        self.webhooks = 0
        self.checks = anyio.CapacityLimiter(settings.upload_checks)

    @contextlib.contextmanager
    def upload_slot(self, request: Request) -> Iterator[None]:
        """Hold one of the service's upload slots while a wheel body streams and is checked."""
        limit = self.max_uploads
        refusal = TooManyUploads(
            f"{limit} uploads are already streaming; retry in a few seconds",
            detail={"max_uploads": limit},
        )
        with self._slot(request, "uploads", limit, refusal):
            yield

    @contextlib.contextmanager
    def webhook_slot(self, request: Request) -> Iterator[None]:
        """Hold one of the service's webhook slots while a delivery's body is read and verified."""
        limit = self.max_webhooks
        refusal = TooManyWebhooks(
            f"{limit} webhook deliveries are already being read; redeliver in a few seconds",
            detail={"max_webhooks": limit},
        )
        with self._slot(request, "webhooks", limit, refusal):
            yield

    @contextlib.contextmanager
    def _slot(
        self, request: Request, counter: str, limit: int, refusal: ApiError
    ) -> Iterator[None]:
        if getattr(self, counter) >= limit:
            log.info(
                "event=slot_refused counter=%s_in_flight limit=%s path=%s",
                counter,
                limit,
                request.url.path,
            )
            raise refusal
        setattr(self, counter, getattr(self, counter) + 1)
        try:
            yield
        finally:
            setattr(self, counter, getattr(self, counter) - 1)


def install(app: Any, settings: Settings) -> None:
    """The body deadline middleware on ``app``."""
    app.add_middleware(
        BodyDeadlineMiddleware,
        idle_s=settings.body_timeout_s,
        deadline_s=settings.body_deadline_s,
        min_rate_bytes_s=settings.body_min_rate_kb * 1024,
    )
