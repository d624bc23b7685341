"""One comparison series in force per subject and family, held by the database: concurrent
re-pins through a real service, and a store left with several in force by older code, on SQLite
and on a real PostgreSQL (``tests/postgres.py``; skipped only where its binaries are absent)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from service.db import SCHEMA_HEAD, alembic_config, migrate
from testkit import loopback
from testkit.service import Service
from testkit.wheels import make_wheel
from tests.fakesubjects import SDPA_CONFIGS
from tests.helpers import register, submit_wheel
from tests.postgres import postgres_server, postgres_url  # noqa: F401 - fixtures

ADMIN = "admin-token-for-tests"
RACERS = 8
ROUNDS = 5  # re-pins per racer: 40 in all, 8 at once

StartService = Callable[..., Service]


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite3'}"
    return str(request.getfixturevalue("postgres_url"))


def repin(url: str, config: str | None) -> httpx.Response:
    return loopback.post(
        f"{url}/api/pins/sm_90/sdpa_bwd",
        json={"config": config, "reason": "race"},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=60,
    )


def pins(svc: Service) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = loopback.get(f"{svc.url}/api/pins?subject=sdpa_bwd").json()[
        "items"
    ]
    return items


def test_concurrent_re_pins_leave_one_series_in_force_and_a_null_re_pin_chooses_again(
    make_service: StartService, database: str, tmp_path: Path
) -> None:
    svc = make_service(
        FE_CI_DATABASE_URL=database, FE_CI_GPU_ARCHS="sm_90", FE_CI_ADMIN_TOKEN=ADMIN
    )
    start = threading.Barrier(RACERS)

    def racer(i: int) -> list[httpx.Response]:
        start.wait(timeout=60)
        return [repin(svc.url, SDPA_CONFIGS[(i + k) % len(SDPA_CONFIGS)]) for k in range(ROUNDS)]

    with ThreadPoolExecutor(RACERS) as pool:
        answers = [r for rs in pool.map(racer, range(RACERS)) for r in rs]
    listed = pins(svc)
    in_force = [p for p in listed if p["in_force"]]
    assert len(in_force) == 1, [p["series"] for p in in_force]  # the database holds it
    # none lost its race: a re-pin that found another's series started goes after it
    refused = [r.text for r in answers if r.status_code != 201]
    assert refused == [], refused[:3]
    assert in_force[0]["series"] == len(listed) == RACERS * ROUNDS
    started = sorted(r.json()["pin"]["series"] for r in answers)
    assert started == list(range(1, RACERS * ROUNDS + 1))  # each re-pin a series of its own
    # each retired the series before its own, and no two retired the same one
    retired = [r.json()["retired"] for r in answers]
    assert sorted(p["series"] for p in retired if p) == list(range(1, RACERS * ROUNDS))
    newest = in_force[0]

    # re-pinned to nothing: no series is in force, and the next lease carries no point, so the
    # next robust measurement chooses again (never a stale series coming back)
    resp = repin(svc.url, None)
    assert resp.status_code == 201, resp.text
    assert resp.json()["pin"] is None and resp.json()["retired"]["series"] == newest["series"]
    assert [p for p in pins(svc) if p["in_force"]] == []
    gpu = register(svc, "h200", arch="sm_90")
    submit_wheel(svc, make_wheel(tmp_path / "w", "1.32.0", ""))
    lease = gpu.post("/api/jobs/claim", json={}).json()
    assert lease["kind"] == "gpu" and lease["comparison"] == []


def test_the_migration_retires_the_duplicates_older_code_left_in_force(database: str) -> None:
    """A store at 0013 where racing re-pins left series 3, 5 and 7 in force: after the
    migration the newest (7) alone is, the others retired when it was pinned, and the database
    refuses a second one from then on."""
    command.upgrade(alembic_config(database), "0013")
    engine = create_engine(database)
    insert = text(
        "INSERT INTO comparison_pins (subject, family, series, config, definition, source,"
        " reason, created_at, retired_at) VALUES ('sdpa_bwd', 'sm_90', :series, :config, 'd',"
        " 'operator', '', :created, :retired)"
    )
    with engine.begin() as conn:
        for series in range(1, 8):
            in_force = series in (3, 5, 7)
            conn.execute(
                insert,
                {
                    "series": series,
                    "config": SDPA_CONFIGS[series % len(SDPA_CONFIGS)],
                    "created": f"2026-01-0{series} 00:00:00",
                    "retired": None if in_force else f"2026-01-0{series + 1} 00:00:00",
                },
            )
    migrate(database)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == SCHEMA_HEAD
        rows = conn.execute(
            text("SELECT series, retired_at FROM comparison_pins ORDER BY series")
        ).all()
    assert [s for s, retired in rows if retired is None] == [7]
    retired_at = {s: str(r) for s, r in rows}
    assert retired_at[3].startswith("2026-01-07") and retired_at[5].startswith("2026-01-07")
    assert retired_at[4].startswith("2026-01-05")  # rows retired before stay as they were
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(
            insert,
            {"series": 8, "config": SDPA_CONFIGS[0], "created": "2026-01-09", "retired": None},
        )
    engine.dispose()
