"""Migration 0021 on a database at 0019, SQLite and PostgreSQL: comparison pins
are kept per cell of the matrix. Every pin is its family's host cell (named as the family) with
its series, config and retirement unchanged, every determinism record still points at its pin,
and "one in force" holds per (subject, cell): a backend cell's series 1 stands beside its
family's. A downgrade gives the per-family schema back, dropping only the backend cells' pins."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from service.db import SCHEMA_HEAD, alembic_config, migrate
from tests.postgres import PostgresServer, postgres_server, postgres_url  # noqa: F401 - fixtures

NOW = "2026-12-01 00:00:00"
CELL = "sm_90-cudnn9.28.1"
# (id, subject, family, series, config, retired_at) as a store at 0019 holds them
PINS = (
    (1, "sdpa_bwd", "sm_90", 1, "b4_h16_s2048_d128_causal", "2026-12-02 00:00:00"),
    (2, "sdpa_bwd", "sm_90", 2, "b8_h16_s4096_d128_causal", None),
    (3, "flex_attention_bwd", "sm_90", 1, "b2_s2048_h16_d128_causal", None),
    (4, "sdpa_bwd", "sm_100", 1, "b4_h16_s2048_d128_causal", None),
)
INSERT_PIN = (
    "INSERT INTO comparison_pins (id, subject, family, {cell}series, config, definition, source,"
    " reason, created_at, retired_at) VALUES (:id, :subject, :family, {value}:series, :config,"
    " 'd', 'measured', '', :created, :retired)"
)


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite3'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    make: Callable[[], str] = server.create_database
    return make()


def _pin(pin_id: int, subject: str, family: str, series: int, config: str, retired: Any) -> dict:
    return {
        "id": pin_id,
        "subject": subject,
        "family": family,
        "series": series,
        "config": config,
        "created": NOW,
        "retired": retired,
    }


def _fill_0019(url: str) -> None:
    """A build, its sm_90 job, the pins of ``PINS`` and a determinism record on each."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO builds (id, source, created_at, verdict, verdict_reason)"
                " VALUES (1, 'wheel', :now, 'pass', '')"
            ),
            {"now": NOW},
        )
        conn.execute(
            text(
                "INSERT INTO jobs (id, build_id, kind, family, cell, requires, stages, state,"
                " reason, attempt, environment, created_at) VALUES (1, 1, 'gpu', 'sm_90',"
                " 'sm_90', 'arch=sm_90', '[]', 'finished', '', 1, '{}', :now)"
            ),
            {"now": NOW},
        )
        for row in PINS:
            conn.execute(text(INSERT_PIN.format(cell="", value="")), _pin(*row))
            conn.execute(
                text(
                    "INSERT INTO determinism_records (build_id, job_id, family, subject, key,"
                    " config, measured, bits, changed, cost_regressed, pin_id, cost_band, copied)"
                    " VALUES (1, 1, :family, :subject, :key, :config, '{}', 'first', '{}',"
                    " false, :pin, '{}', false)"
                ),
                {
                    "family": row[2],
                    "subject": row[1],
                    "key": f"k{row[0]}",
                    "config": row[4],
                    "pin": row[0],
                },
            )
    engine.dispose()


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


PIN_COLUMNS = "id, subject, family, series, config, retired_at"


def test_0021_keeps_every_pin_as_its_host_cells_and_keys_one_in_force_by_cell(
    database: str,
) -> None:
    command.upgrade(alembic_config(database), "0019")
    _fill_0019(database)
    before = _rows(database, f"SELECT {PIN_COLUMNS} FROM comparison_pins ORDER BY id")
    records = _rows(database, "SELECT key, pin_id FROM determinism_records ORDER BY id")
    migrate(database)
    assert _rows(database, "SELECT version_num FROM alembic_version") == [(SCHEMA_HEAD,)]
    after = _rows(database, f"SELECT {PIN_COLUMNS}, cell FROM comparison_pins ORDER BY id")
    assert [row[:-1] for row in after] == before  # every pin unchanged
    assert [row[-1] for row in after] == [row[2] for row in before]  # each its host cell
    assert _rows(database, "SELECT key, pin_id FROM determinism_records ORDER BY id") == records

    engine = create_engine(database)
    insert = text(INSERT_PIN.format(cell="cell, ", value=":cell, "))
    # a backend cell of sm_90 starts its own series 1 beside the host cell's series 2 ...
    with engine.begin() as conn:
        conn.execute(insert, {**_pin(5, "sdpa_bwd", "sm_90", 1, "x", None), "cell": CELL})
        conn.execute(
            text(
                "INSERT INTO determinism_records (build_id, job_id, family, subject, key,"
                " measured, bits, changed, cost_regressed, pin_id, cost_band, copied)"
                " VALUES (1, 1, 'sm_90', 'sdpa_bwd', 'k5', '{}', 'first', '{}', false, 5,"
                " '{}', false)"
            )
        )
    # ... and "one in force" and one row per series still hold, per (subject, cell)
    for clash in (
        {**_pin(6, "sdpa_bwd", "sm_90", 2, "y", None), "cell": CELL},  # a second in force
        {**_pin(6, "sdpa_bwd", "sm_90", 2, "y", NOW), "cell": "sm_90"},  # series 2 again
    ):
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(insert, clash)
    engine.dispose()

    # down again: the per-family schema, the backend cell's pin gone, its record kept unpinned
    command.downgrade(alembic_config(database), "0019")
    assert _rows(database, f"SELECT {PIN_COLUMNS} FROM comparison_pins ORDER BY id") == before
    assert _rows(database, "SELECT key, pin_id FROM determinism_records ORDER BY id") == [
        *records,
        ("k5", None),
    ]
    # and up once more, as before
    migrate(database)
    assert [r[-1] for r in _rows(database, "SELECT id, cell FROM comparison_pins ORDER BY id")] == [
        row[2] for row in before
    ]
