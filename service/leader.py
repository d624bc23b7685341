"""The periodic work's one process: on PostgreSQL, of several service replicas only the one holding
a session-level advisory lock sweeps leases, removes orphan blobs, pumps notifications, bisections
and GitHub statuses, and watches the package index; the others wait, and the first of them to try
after that process is gone (its connection closed, however it died) takes over.

On SQLite there is one service process, and it always holds it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

log = logging.getLogger("fe_ci.leader")

# Fixed 64-bit keys of the service's advisory locks ("fe-ci" and a word; db.MIGRATION_LOCK too).
PERIODIC = 0x6665_6369_7065_7269
BISECT = 0x6665_6369_6269_7365
ADMISSION = 0x6665_6369_6164_6D69


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


class Leader:
    """``holds()``: whether this process does the periodic work now (called before each round)."""

    def __init__(self, engine: Engine, key: int = PERIODIC) -> None:
        self.engine, self.key = engine, key
        self.conn: Connection | None = None
        self.held = False
        self.lock = threading.Lock()

    def holds(self) -> bool:
        if not is_postgres(self.engine):
            return True
        with self.lock:
            try:
                return self._check()
            except SQLAlchemyError as exc:
                if self.held:
                    log.warning("event=periodic_lock_lost reason=%r", str(exc)[:200])
                self._drop()
                return False

    def _check(self) -> bool:
        if self.conn is None:
            self.conn = self.engine.connect()
        if self.held:  # still ours while the session that took it is alive
            self.conn.execute(text("SELECT 1"))
            self.conn.commit()
            return True
        got = self.conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self.key}).scalar()
        self.conn.commit()
        if got:
            self.held = True
            log.info("event=periodic_lock_taken pid=%s", os.getpid())
        return bool(got)

    def _drop(self) -> None:
        """Close the session itself (not back to the pool): the server frees its locks."""
        conn, self.conn, self.held = self.conn, None, False
        if conn is not None:
            try:
                conn.invalidate()
                conn.close()
            except SQLAlchemyError:
                pass

    def release(self) -> None:
        with self.lock:
            if self.held:
                log.info("event=periodic_lock_released pid=%s", os.getpid())
            self._drop()


@contextmanager
def exclusive(engine: Engine, key: int) -> Iterator[None]:
    """Hold the advisory lock ``key`` across processes for the block, waiting for it (PostgreSQL;
    on SQLite a no-op: one process)."""
    if not is_postgres(engine):
        yield
        return
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        conn.commit()
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            conn.commit()


def hold_for_transaction(session: Session, key: int) -> None:
    """PostgreSQL: the advisory lock ``key`` until the session's transaction ends."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
