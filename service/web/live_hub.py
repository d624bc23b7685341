"""Live streams, bounded and sharing one poll.

Each open stream used to poll the database itself, a snapshot every half second in the request
thread pool: 200 anonymous streams took ``/api/builds``'s median from 8 ms to 1,044 ms, 400 to
4,914 ms, since every page waited behind their snapshots for a thread. Now:

- One poll for all streams (``Hub``): while any stream is open, one task takes a snapshot of each
  watched build every ``POLL_S``, all in one worker thread and one session, and wakes the
  streams; a stream only compares and sends. N streams of one build cost one snapshot per poll,
  and the pages keep the rest of the thread pool whatever the number of streams.
- A cap on open streams (``StreamSlots``): ``FE_CI_MAX_STREAMS`` over the whole service and
  ``FE_CI_MAX_STREAMS_PER_CLIENT`` per client address; past either, ``503 too_many_streams`` with
  ``Retry-After``, answered before any snapshot is taken. A stream's slot is given back however
  it ends (finished, timed out, the client gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import anyio
from fastapi import FastAPI, Request

from service.errors import TooManyRequests

log = logging.getLogger("fe_ci.live")

POLL_S = 0.5  # how often the hub looks for a change

Snapshot = dict[str, Any]
Take = Callable[[FastAPI, list[int]], dict[int, Snapshot | None]]


class TooManyStreams(TooManyRequests):
    code, message = "too_many_streams", "too many live streams open; retry in a few seconds"


class Hub:
    """The one poll of every watched build; ``take(app, ids)`` snapshots them in one go (None
    for a build that is gone)."""

    def __init__(self, app: FastAPI, take: Take) -> None:
        self.app, self.take = app, take
        self.watchers: Counter[int] = Counter()
        self.latest: dict[int, tuple[Snapshot | None, str]] = {}
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.polls = 0

    def watch(self, build_id: int, first: Snapshot) -> None:
        self.watchers[build_id] += 1
        if build_id not in self.latest:
            self.latest[build_id] = (first, json.dumps(first, sort_keys=True))
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def unwatch(self, build_id: int) -> None:
        self.watchers[build_id] -= 1
        if self.watchers[build_id] <= 0:
            del self.watchers[build_id]
            self.latest.pop(build_id, None)

    def current(self, build_id: int) -> tuple[Snapshot | None, str]:
        return self.latest.get(build_id, (None, ""))

    async def wait(self, timeout_s: float) -> None:
        """Until the next poll has stored its snapshots (or ``timeout_s``)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), timeout_s)

    async def _run(self) -> None:
        while self.watchers:
            await asyncio.sleep(POLL_S)
            ids = list(self.watchers)
            if not ids:
                break
            try:
                snaps = await anyio.to_thread.run_sync(self.take, self.app, ids)
            except Exception:
                log.exception("event=live_poll_failed builds=%s", len(ids))
                continue
            self.polls += 1
            for build_id, snap in snaps.items():
                if build_id in self.watchers:
                    body = json.dumps(snap, sort_keys=True) if snap is not None else ""
                    self.latest[build_id] = (snap, body)
            woken, self.changed = self.changed, asyncio.Event()
            woken.set()


class StreamSlots:
    """Open streams in total and per client address (one per app, ``ServiceState.live_slots``)."""

    def __init__(self, max_streams: int, max_per_client: int) -> None:
        self.max_streams, self.max_per_client = max_streams, max_per_client
        self.total = 0
        self.per_client: Counter[str] = Counter()

    @contextlib.contextmanager
    def hold(self, request: Request) -> Iterator[None]:
        client = request.client.host if request.client else "?"
        if self.total >= self.max_streams:
            raise self._refusal(request, "max_streams", self.max_streams)
        if self.per_client[client] >= self.max_per_client:
            raise self._refusal(request, "max_streams_per_client", self.max_per_client)
        self.total += 1
        self.per_client[client] += 1
        try:
            yield
        finally:
            self.total -= 1
            self.per_client[client] -= 1
            if self.per_client[client] <= 0:
                del self.per_client[client]

    @staticmethod
    def _refusal(request: Request, setting: str, limit: int) -> TooManyStreams:
        log.info("event=stream_refused path=%s %s=%s", request.url.path, setting, limit)
        return TooManyStreams(
            f"{limit} live streams are already open ({setting}); retry in a few seconds, or "
            "read /builds/{id}/live.json",
            detail={setting: limit},
        )
