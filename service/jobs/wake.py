"""Wake long-polling runners when the queue changes, in this process and in every other replica.

In one process a change swaps the ``Wake``'s ``asyncio.Event`` (every claim waiting on it wakes
and claims again). On PostgreSQL the change is also sent to the other replicas: one thread per
process sends ``NOTIFY fe_ci_queue`` after the change's commit (changes coalesce while one is
being sent), and one task holds a connection that ``LISTEN``s and wakes this process's claims on
each notification from another process. A listener that lost its connection wakes every claim
once it is back (it may have missed one), and while it is away a waiting claim looks at the queue
every second, as on SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading

from sqlalchemy import Engine, make_url, text
from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger("fe_ci.wake")

CHANNEL = "fe_ci_queue"
LOCAL_RECHECK_S = 1.0  # a waiting claim looks at the queue again this often without notifications
LISTENING_RECHECK_S = 30.0  # with them: the longest claim (core.wire.ClaimRequest.wait_s)
RECONNECT_S = (0.5, 30.0)  # the listener's first wait to reconnect, and its cap


class Wake:
    """The queue's change event: a long poll waits on the current one, a change sets it and puts
    a fresh one in its place (and tells the other replicas). One per app (``ServiceState.wake``),
    started with its event loop."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.listening = False  # a LISTEN connection is up: other replicas' changes reach us
        self.sender: Sender | None = None

    def start(self, loop: asyncio.AbstractEventLoop, engine: Engine) -> list[asyncio.Task[None]]:
        """Within the running loop: the event claims wait on, and on PostgreSQL the sender and
        the listener (its task returned for the app to cancel at shutdown)."""
        self.event, self.loop = asyncio.Event(), loop
        if engine.dialect.name != "postgresql":
            return []
        replica = secrets.token_hex(8)
        self.sender = Sender(engine, replica)
        dsn = _dsn(engine.url.render_as_string(hide_password=False))
        return [asyncio.create_task(self._listen(dsn, replica))]

    def stop(self) -> None:
        if self.sender is not None:
            with contextlib.suppress(Exception):
                self.sender.stop()

    def current_event(self) -> asyncio.Event:
        return self.event

    def recheck_s(self) -> float:
        """How long a waiting claim may sleep before looking at the queue itself."""
        return LISTENING_RECHECK_S if self.listening else LOCAL_RECHECK_S

    def queue_changed(self) -> None:
        """The queue changed (called after the change's commit): wake the claims of every
        replica. Safe from the event loop and from worker threads alike."""
        self._wake_here()
        if self.sender is not None:
            self.sender.signal()

    def _wake_here(self) -> None:
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

    async def _listen(self, dsn: str, replica: str) -> None:
        try:
            import psycopg  # PostgreSQL's extra (pyproject.toml): a SQLite service never needs it
        except ImportError:  # another driver: waiting claims keep looking every second
            log.warning("event=wake_listen_unavailable reason='psycopg (3) is not installed'")
            return

        wait = RECONNECT_S[0]
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.listening = True
                    wait = RECONNECT_S[0]
                    log.info("event=wake_listening channel=%s", CHANNEL)
                    self._wake_here()  # anything sent while we were away
                    async for note in conn.notifies():
                        if note.payload != replica:
                            self._wake_here()
            except psycopg.Error as exc:
                log.warning("event=wake_listen_lost reason=%r retry_in_s=%s", str(exc)[:200], wait)
            finally:
                self.listening = False
            await asyncio.sleep(wait)
            wait = min(wait * 2, RECONNECT_S[1])


class Sender:
    """One thread that sends ``NOTIFY`` for this process; signals coalesce while it sends."""

    def __init__(self, engine: Engine, replica: str) -> None:
        self.engine, self.replica = engine, replica
        self.due = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="wake-notify", daemon=True)
        self.thread.start()

    def signal(self) -> None:
        self.due.set()

    def stop(self) -> None:
        self.stopping = True
        self.due.set()

    def _run(self) -> None:
        while True:
            self.due.wait()
            if self.stopping:
                return
            self.due.clear()
            try:
                with self.engine.connect() as conn:
                    notify = text("SELECT pg_notify(:c, :p)")
                    conn.execute(notify, {"c": CHANNEL, "p": self.replica})
                    conn.commit()
            except SQLAlchemyError as exc:  # the listeners' recheck covers a lost one
                log.warning("event=wake_notify_failed reason=%r", str(exc)[:200])


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
