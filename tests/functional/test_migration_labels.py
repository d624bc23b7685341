"""Migration 0017 on a database of the previous head (0016), SQLite and PostgreSQL: every job gets
the requirements its kind and family meant (a GPU job is its family's host-backend cell, named as
the family), and every runner offers the labels its family and builder columns said."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from core import cells
from service.db import SCHEMA_HEAD, alembic_config, migrate
from tests.postgres import PostgresServer, postgres_server, postgres_url  # noqa: F401 - fixtures

NOW = "'2026-12-01 00:00:00'"


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite3'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    make: Callable[[], str] = server.create_database
    return make()


def _fill_0016(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO builds (id, source, created_at, verdict, verdict_reason)"
                f" VALUES (1, 'wheel', {NOW}, 'pending', '')"
            )
        )
        ids = itertools.count(1)
        for kind, family in (("build", None), ("cpu", None), ("gpu", "sm_90"), ("gpu", "sm_100")):
            conn.execute(
                text(
                    "INSERT INTO jobs (id, build_id, kind, family, stages, state, reason, attempt,"
                    f" environment, created_at) VALUES (:id, 1, :kind, :family, '[]', 'queued',"
                    f" '', 1, '{{}}', {NOW})"
                ),
                {"id": next(ids), "kind": kind, "family": family},
            )
        for name, labels, family, builder in (
            ("old", {}, "sm_90", False),  # registered before labels were kept
            ("builder", {"gpu": "H200"}, None, True),
            ("cpu", {}, None, False),
        ):
            conn.execute(
                text(
                    "INSERT INTO runners (name, labels, family, builder, token_hash, created_at,"
                    f" last_seen_at) VALUES (:name, :labels, :family, :builder, :tok, {NOW}, {NOW})"
                ),
                {
                    "name": name,
                    "labels": json.dumps(labels),
                    "family": family,
                    "builder": builder,
                    "tok": name * 8,
                },
            )
    engine.dispose()


def test_0017_fills_requirements_cells_and_labels(database: str) -> None:
    command.upgrade(alembic_config(database), "0016")
    _fill_0016(database)
    migrate(database)
    engine = create_engine(database)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == SCHEMA_HEAD
        jobs = conn.execute(text("SELECT kind, requires, cell FROM jobs ORDER BY id")).all()
        runners = dict(conn.execute(text("SELECT name, labels FROM runners")).all())
    engine.dispose()
    assert [tuple(j) for j in jobs] == [
        ("build", "builder", None),
        ("cpu", "", None),
        ("gpu", "arch=sm_90", "sm_90"),
        ("gpu", "arch=sm_100", "sm_100"),
    ]
    # the requirements filled are exactly what the cells of the host backend require now
    assert jobs[2][1] == cells.requires_text(cells.Cell("sm_90").requirements)
    labels = {k: json.loads(v) if isinstance(v, str) else v for k, v in runners.items()}
    assert labels == {
        "old": {"arch": "sm_90"},
        "builder": {"gpu": "H200", "builder": "1"},
        "cpu": {},
    }
    # and the labels satisfy what they took before: the old sm_90 runner its family's job
    assert cells.satisfied(cells.parse_requires(jobs[2][1]), labels["old"])
    assert not cells.satisfied(cells.parse_requires(jobs[3][1]), labels["old"])
    assert cells.satisfied(cells.parse_requires(jobs[0][1]), labels["builder"])
