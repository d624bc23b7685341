"""Engine, sessions and migrations. SQLite by default (WAL, busy timeout, foreign keys on)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

MIGRATIONS = Path(__file__).parent / "migrations"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def private_file(path: Path) -> None:
    """The SQLite file, made if needed, readable and writable by the service's user alone (0600;
    SQLite gives its -wal and -shm files the same mode): it holds every token's hash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    path.chmod(0o600)


def _sqlite_path(url: str) -> Path | None:
    path = url.split("///", 1)[-1] if url.startswith("sqlite") else ""
    return Path(path) if path and path != ":memory:" else None


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        if (path := _sqlite_path(url)) is not None:
            private_file(path)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 10})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


# Any fixed 64-bit key: the session-level Postgres advisory lock that migrations hold.
MIGRATION_LOCK = 0x6665_6369_6D69_6772


def migrate(url: str) -> None:
    """Bring the schema to the newest revision (idempotent).

    On Postgres several service processes may start at once: each waits for the advisory lock,
    so one migrates and the others find the schema at head.
    """
    if not url.startswith("postgresql"):
        if (path := _sqlite_path(url)) is not None:
            private_file(path)  # before SQLite makes it, with the process's umask
        command.upgrade(alembic_config(url), "head")
        return
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as lock:
            lock.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
            lock.commit()  # hold the lock, not a transaction, while Alembic works
            try:
                command.upgrade(alembic_config(url), "head")
            finally:
                lock.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
                lock.commit()
    finally:
        engine.dispose()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def locks_rows(session: Session) -> bool:
    """Postgres locks rows; SQLite has one writer at a time, so its writes never interleave."""
    return session.get_bind().dialect.name == "postgresql"
