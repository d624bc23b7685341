"""Engine, sessions and migrations. SQLite by default (WAL, busy timeout, foreign keys on)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    create_engine,
    event,
    inspect,
    text,
)
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"

# The newest revision in migrations/versions; tests/functional/test_migrations.py holds it to
# Alembic's own head, so a new migration that forgets it fails there.
SCHEMA_HEAD = "0021"

# Alembic's own version table, as ``alembic stamp`` makes it (alembic/ddl/impl.py).
_VERSIONS = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)


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
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


# Any fixed 64-bit key: the session-level Postgres advisory lock that migrations hold.
MIGRATION_LOCK = 0x6665_6369_6D69_6772


def migrate(url: str) -> None:
    """Bring the schema to the newest revision (idempotent).

    A database at head is left as it is, and an empty one gets the models' tables and the head
    stamp in one transaction (Alembic's recipe for a database built from scratch): neither needs
    Alembic, whose import and twelve revisions were a sixth of a service start's CPU. Only a
    database behind head runs the revisions. ``tests/functional/test_migrations.py`` checks that
    both ways give the same schema.

    On Postgres several service processes may start at once: each waits for the advisory lock,
    so one migrates and the others find the schema at head.
    """
    if not url.startswith("postgresql"):
        if (path := _sqlite_path(url)) is not None:
            private_file(path)  # before SQLite makes it, with the process's umask
        if not _create_or_find_head(url):
            _upgrade(url)
        return
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as lock:
            lock.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
            lock.commit()  # hold the lock, not a transaction, while Alembic works
            try:
                if not _create_or_find_head(url):
                    _upgrade(url)
            finally:
                lock.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
                lock.commit()
    finally:
        engine.dispose()


def _upgrade(url: str) -> None:
    from alembic import command

    command.upgrade(alembic_config(url), "head")


def _create_or_find_head(url: str) -> bool:
    """True where the schema is at head, found so or made so from nothing; False where it has
    tables but is behind (or not stamped), for Alembic's revisions to bring up."""
    from service.models import Base

    engine = _transactional_engine(url)
    try:
        with engine.begin() as conn:
            tables = set(inspect(conn).get_table_names())
            if not tables:
                _copy(Base.metadata).create_all(conn)
                _VERSIONS.create(conn)
                conn.execute(_VERSIONS.insert().values(version_num=SCHEMA_HEAD))
                return True
            return _VERSIONS.name in tables and _at_head(conn)
    finally:
        engine.dispose()


def _copy(models: MetaData) -> MetaData:
    """The models' tables in a metadata of their own. Creating a ``use_alter`` key on PostgreSQL
    marks the models' constraint to be left out of CREATE TABLE for good, and SQLite, which
    cannot add it by ALTER, would then get no such key from the same process."""
    copy = MetaData(naming_convention=models.naming_convention)
    for table in models.tables.values():
        table.to_metadata(copy)
    return copy


def _at_head(conn: Connection) -> bool:
    return list(conn.execute(_VERSIONS.select()).scalars()) == [SCHEMA_HEAD]


def _transactional_engine(url: str) -> Engine:
    """An engine whose transactions hold DDL too. pysqlite opens a transaction only before a
    write, so a CREATE TABLE would commit at once and a crash part-way would leave a schema with
    no stamp; here every transaction is SQLite's own ``BEGIN IMMEDIATE``, which also makes two
    services starting on one new file take turns."""
    if not url.startswith("sqlite"):
        return create_engine(url, poolclass=NullPool)
    engine = create_engine(url, poolclass=NullPool, connect_args={"timeout": 10})

    def connect(dbapi_conn: Any, record: Any) -> None:
        _sqlite_pragmas(dbapi_conn, record)
        dbapi_conn.isolation_level = None  # the driver's own BEGINs off: ours below

    event.listen(engine, "connect", connect)
    event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
    return engine


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def locks_rows(session: Session) -> bool:
    """Postgres locks rows; SQLite has one writer at a time, so its writes never interleave."""
    return session.get_bind().dialect.name == "postgresql"
