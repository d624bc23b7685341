"""Wake long-polling runners when the queue changes (one service process; others poll)."""

from __future__ import annotations

import asyncio


class Wake:
    """The queue's change event: a long poll waits on the current one, a change sets it and puts
    a fresh one in its place. One per app (``ServiceState.wake``), started with its event loop."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.event, self.loop = asyncio.Event(), loop

    def current_event(self) -> asyncio.Event:
        return self.event

    def queue_changed(self) -> None:
        """Safe from the event loop and from worker threads alike."""
        loop = self.loop
        if loop is None:
            return

        def _swap() -> None:
            old, self.event = self.event, asyncio.Event()
            old.set()

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            _swap()
        else:
            loop.call_soon_threadsafe(_swap)
