"""The sweep and a hand-back read what they write back under SQLite's write lock.

A sweep that read an expired lease without it could write its requeue over a claim committed
meanwhile by another request (seen as a job left queued at its third attempt with a runner that
held it). Here another connection holds the write lock of a real SQLite file, and the session is
told not to wait for it: a sweep or hand-back that takes the lock before reading fails at once,
where one that only read first would have gone on.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.db import make_engine, migrate
from service.jobs import queue
from service.results.events import Reactions


@pytest.fixture()
def db(tmp_path: Path) -> Iterator[tuple[Path, sessionmaker[Session]]]:
    path = tmp_path / "fe-ci.sqlite3"
    url = f"sqlite:///{path}"
    migrate(url)
    engine = make_engine(url)
    yield path, sessionmaker(engine)
    engine.dispose()


@pytest.fixture()
def writer(db: tuple[Path, sessionmaker[Session]]) -> Iterator[sqlite3.Connection]:
    """Another process's writer, holding the write lock until the test ends."""
    con = sqlite3.connect(db[0], isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    yield con
    con.execute("ROLLBACK")
    con.close()


# no GitHub, no listeners: these tests look at the locks alone
NO_REACTIONS = Reactions(Settings())


def _impatient(session: Session) -> Session:
    session.execute(text("PRAGMA busy_timeout=0"))
    return session


def test_a_sweep_takes_the_write_lock_before_it_reads(
    db: tuple[Path, sessionmaker[Session]], writer: sqlite3.Connection
) -> None:
    with _impatient(db[1]()) as session, pytest.raises(OperationalError, match="locked"):
        queue.sweep(session, NO_REACTIONS)


def test_a_hand_back_takes_the_write_lock_before_it_reads(
    db: tuple[Path, sessionmaker[Session]], writer: sqlite3.Connection
) -> None:
    class Impatient(sessionmaker[Session]):
        def __call__(self, **kw: object) -> Session:  # type: ignore[override]
            return _impatient(super().__call__(**kw))

    sessions = Impatient(db[1].kw["bind"])
    with pytest.raises(OperationalError, match="locked"):
        queue.hand_back(sessions, 1, "token", NO_REACTIONS)


def test_without_another_writer_a_sweep_finds_nothing_to_do(
    db: tuple[Path, sessionmaker[Session]],
) -> None:
    with db[1]() as session:
        assert queue.sweep(session, NO_REACTIONS) == 0
        session.commit()
