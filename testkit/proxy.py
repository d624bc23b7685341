"""A TCP proxy on 127.0.0.1 in front of a service, that can be told to fail the way a restarting
service or its load balancer does: answer ``503`` with ``Retry-After``, or drop connections.

    with Proxy(service.port) as proxy:      # runners use proxy.url
        proxy.fail("unavailable", retry_after=1)          # every request: 503
        proxy.fail("unavailable", path=r"/finish$")       # only those whose path matches
        proxy.fail("drop")                                # cut every connection, now and new
        proxy.heal()                                      # pass everything again

It reads each request's head (and its ``Content-Length`` body) to decide, and pipes the bytes
through unchanged otherwise; responses are piped back as they come. A connection closed by the
client is closed upstream, so the service sees its client leave. It runs its own event loop in a
thread and counts what it did (``proxy.counts``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

T = TypeVar("T")
Kind = Literal["unavailable", "drop"]
HEAD_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Fault:
    kind: Kind
    path: re.Pattern[str] | None  # None: every request
    retry_after: int | None


class Proxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.fault: Fault | None = None
        self.counts: Counter[str] = Counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._live: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Proxy:
        self._thread.start()
        self._server = self._run(
            asyncio.start_server(self._serve, "127.0.0.1", 0, limit=HEAD_LIMIT)
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def __exit__(self, *_exc: object) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for writer in list(self._live):
                writer.transport.abort()

        self._run(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def fail(self, kind: Kind, *, path: str | None = None, retry_after: int | None = 1) -> None:
        """Fail the requests ``path`` matches (all, without it); ``drop`` also cuts the
        connections open now (a long poll in flight included)."""
        self.fault = Fault(kind, re.compile(path) if path else None, retry_after)
        if kind == "drop" and path is None:
            self._run(self._abort_all())

    def heal(self) -> None:
        self.fault = None

    async def _abort_all(self) -> None:
        for writer in list(self._live):
            writer.transport.abort()
            self.counts["dropped"] += 1

    def _fault_for(self, path: str) -> Fault | None:
        fault = self.fault
        if fault is None or (fault.path is not None and not fault.path.search(path)):
            return None
        return fault

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._live.add(writer)
        upstream: asyncio.StreamWriter | None = None
        pump: asyncio.Task[None] | None = None
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path, length, chunked = _parse(head)
                fault = self._fault_for(path)
                if fault is not None and fault.kind == "drop":
                    self.counts["dropped"] += 1
                    writer.transport.abort()
                    return
                if fault is not None:
                    await reader.readexactly(length)  # read it all, so closing sends no RST
                    writer.write(_unavailable(fault.retry_after))
                    await writer.drain()
                    self.counts["unavailable"] += 1
                    return
                if upstream is None:
                    up_reader, upstream = await asyncio.open_connection(
                        "127.0.0.1", self.upstream_port
                    )
                    pump = asyncio.create_task(_pipe(up_reader, writer))
                upstream.write(head)
                if chunked:  # a streamed body: pass the rest of the connection through as is
                    await _pipe(reader, upstream)
                    return
                await _copy(reader, upstream, length)
                self.counts["passed"] += 1
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return
        finally:
            self._live.discard(writer)
            if pump is not None:
                pump.cancel()
            for w in (upstream, writer):
                if w is not None:
                    w.close()


def _parse(head: bytes) -> tuple[str, int, bool]:
    """(path, Content-Length, chunked) of a request head."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    path = parts[1].split("?", 1)[0] if len(parts) > 1 else ""
    length, chunked = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
        elif name.strip().lower() == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    return path, length, chunked


def _unavailable(retry_after: int | None) -> bytes:
    body = b"service unavailable (the proxy was told to fail)\n"
    head = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    if retry_after is not None:
        head += f"Retry-After: {retry_after}\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, length: int) -> None:
    while length > 0:
        chunk = await reader.read(min(length, 1 << 16))
        if not chunk:
            raise ConnectionError("the client left mid-body")
        writer.write(chunk)
        await writer.drain()
        length -= len(chunk)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes from ``reader`` to ``writer`` until either side ends; then close ``writer``."""
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        while chunk := await reader.read(1 << 16):
            writer.write(chunk)
            await writer.drain()
    writer.close()
