"""The PostgreSQL fixtures: a throwaway server (``testkit/postgres.py``) for the test session,
and a fresh database in it for each test that asks for ``postgres_url``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.postgres import NoServerUser, PostgresServer, find_bindir, running

__all__ = ["PostgresServer", "postgres_server", "postgres_url"]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL cluster for the session; skips only where the server binaries are absent."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip(
            "PostgreSQL server binaries (initdb, pg_ctl) not found; scripts/setup installs them"
        )
    try:
        with running(bindir) as server:
            yield server
    except NoServerUser as exc:
        pytest.skip(str(exc))


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh database on the session's PostgreSQL server."""
    return postgres_server.create_database()
