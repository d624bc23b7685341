"""Wake long-polling runners when the queue changes (one service process; others poll)."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI


def current_event(app: FastAPI) -> asyncio.Event:
    event: asyncio.Event = app.state.queue_changed
    return event


def queue_changed(app: FastAPI) -> None:
    """Safe from the event loop and from worker threads alike."""
    loop: asyncio.AbstractEventLoop | None = getattr(app.state, "loop", None)
    if loop is None:
        return

    def _swap() -> None:
        old = app.state.queue_changed
        app.state.queue_changed = asyncio.Event()
        old.set()

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        _swap()
    else:
        loop.call_soon_threadsafe(_swap)
