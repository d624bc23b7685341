"""Storage and the runner protocol on both stores: SQLite (the default) and a real PostgreSQL.

Every test here runs once per database: the service is started with ``FE_CI_DATABASE_URL``
pointing at a file SQLite database or at a fresh database on the PostgreSQL server of
``tests/postgres.py`` (127.0.0.1 only), and the test reads that database back itself.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, text

from service.db import alembic_config
from testkit import loopback
from testkit.service import Service
from testkit.waiting import eventually
from tests.helpers import register, report, stage_body, submit_wheel
from tests.postgres import postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.racer import race_runner

pytestmark = pytest.mark.slow  # every test twice, on SQLite and on a PostgreSQL server it starts

StartService = Callable[..., Service]

RACERS = 8
RACE_JOBS = 48  # six a runner if they shared evenly: enough to race on every claim


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite3'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def engine(database: str) -> Iterator[Engine]:
    """The test's own connection to the service's database."""
    eng = create_engine(database)
    yield eng
    eng.dispose()


@pytest.fixture
def start(make_service: StartService, database: str) -> StartService:
    """``start(**env)``: a real service on this test's database."""

    def _start(**env: str) -> Service:
        return make_service(FE_CI_DATABASE_URL=database, **env)

    return _start


def count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def submit_commits(svc: Service, n: int) -> list[int]:
    """``n`` commit builds: each queues one ``build`` job for a runner labelled builder=1."""
    with svc.http() as http:
        return [
            http.post("/validate", json={"commit": f"{i + 1:040x}"}).json()["build_id"]
            for i in range(n)
        ]


def test_the_service_migrates_and_stores_in_the_configured_database(
    start: StartService, engine: Engine, request: pytest.FixtureRequest
) -> None:
    svc = start()
    assert engine.dialect.name == request.node.callspec.params["database"]
    with engine.connect() as conn:
        at = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    script = ScriptDirectory.from_config(alembic_config(str(engine.url)))
    assert at == script.get_current_head()
    assert count(engine, "builds") == 0
    build_id = submit_commits(svc, 1)[0]
    assert count(engine, "builds") == 1 and count(engine, "jobs") == 2  # build, then cpu
    with engine.connect() as conn:
        kinds = conn.execute(text("SELECT kind, state FROM jobs WHERE build_id = :b ORDER BY id"),
                             {"b": build_id}).all()  # fmt: skip
    assert [tuple(k) for k in kinds] == [("build", "queued"), ("cpu", "waiting")]


def test_submit_claim_stage_finish(start: StartService, engine: Engine) -> None:
    svc = start()
    build_id = submit_wheel(svc)
    assert count(engine, "builds") == 1
    runner = register(svc, "r1")
    lease = runner.post("/api/jobs/claim", json={}).json()
    assert lease["build_id"] == build_id and lease["kind"] == "cpu" and lease["attempt"] == 1
    job, token = lease["job_id"], lease["lease_token"]
    assert runner.post("/api/jobs/claim", json={}).status_code == 204  # nothing left
    hb = runner.post(f"/api/jobs/{job}/heartbeat", json={"lease_token": token})
    assert hb.status_code == 200 and hb.json()["cancelled"] is False
    for name in ("install", "probe", "refusal"):
        resp = runner.post(f"/api/jobs/{job}/stages", json=stage_body(token, name))
        assert resp.status_code == 201, resp.text
    assert count(engine, "stages") == 3
    done = runner.post(f"/api/jobs/{job}/finish", json={"lease_token": token})
    assert done.status_code == 200
    r = report(svc, build_id)
    assert r["status"] == "finished" and r["jobs"][0]["runner"] == "r1"
    assert [s["name"] for s in r["jobs"][0]["stages"]] == ["install", "probe", "refusal"]
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT j.state, b.finished_at FROM builds b JOIN jobs j ON j.build_id = b.id"),
        ).one()
    assert row[0] == "finished" and row[1] is not None
    late = runner.post(f"/api/jobs/{job}/stages", json=stage_body(token, "probe"))
    assert late.status_code == 409


def test_an_expired_lease_requeues_and_the_stale_token_gets_409(
    start: StartService, engine: Engine
) -> None:
    svc = start(FE_CI_LEASE_SECONDS="2", FE_CI_SWEEP_INTERVAL_S="0.3")
    build_id = submit_commits(svc, 1)[0]
    a = register(svc, "a", builder="1")
    first = a.post("/api/jobs/claim", json={}).json()
    old = first["lease_token"]
    posted = a.post(f"/api/jobs/{first['job_id']}/stages", json=stage_body(old, "build"))
    assert posted.status_code == 201
    # no heartbeats: the sweeper puts the job back in the queue and drops the attempt's results
    eventually(
        lambda: report(svc, build_id)["jobs"][0]["status"],
        until=lambda status: status == "queued",
        message="the requeue",
    )
    assert count(engine, "stages") == 0
    stale = a.post(f"/api/jobs/{first['job_id']}/stages", json=stage_body(old, "build"))
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_lease"
    # the runner comes back and is handed the job again: attempt 2, a new token
    second = a.post("/api/jobs/claim", json={"wait_s": 2}).json()
    assert second["job_id"] == first["job_id"] and second["attempt"] == 2
    for path in ("stages", "finish"):
        body = stage_body(old, "build") if path == "stages" else {"lease_token": old}
        late = a.post(f"/api/jobs/{first['job_id']}/{path}", json=body)
        assert late.status_code == 409 and late.json()["error"]["code"] == "stale_lease"
    token = second["lease_token"]
    assert a.post(f"/api/jobs/{second['job_id']}/finish", json={"lease_token": token}).is_success
    with engine.connect() as conn:
        state, attempt = conn.execute(
            text("SELECT state, attempt FROM jobs WHERE id = :j"), {"j": first["job_id"]}
        ).one()
    assert (state, attempt) == ("finished", 2)


def test_builds_page_by_cursor(start: StartService) -> None:
    svc = start()
    ids = submit_commits(svc, 7)
    seen: list[int] = []
    cursor = None
    for _ in range(10):
        params = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        page = loopback.get(f"{svc.url}/api/builds", params=params).json()
        seen += [b["id"] for b in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(ids, reverse=True)  # newest first, each once, nothing skipped


def test_two_jobs_of_one_build_finishing_at_once_finish_the_build(
    start: StartService, database: str
) -> None:
    """Two transactions each end one of the build's two jobs; neither committed when the other
    reads. The build must still end finished with a verdict, not stay ``pending``."""
    from service import db
    from service.config import Settings
    from service.models import Build, Job, utcnow
    from service.results import events

    svc = start(FE_CI_GPU_ARCHS="sm_90")
    build_id = submit_wheel(svc)
    cpu = register(svc, "cpu").post("/api/jobs/claim", json={}).json()
    gpu = register(svc, "h200", arch="sm_90").post("/api/jobs/claim", json={}).json()
    assert {cpu["kind"], gpu["kind"]} == {"cpu", "gpu"}
    svc.stop()  # only the two transactions below touch the database

    eng = db.make_engine(database)
    sessions = db.session_factory(eng)

    def finish(session: Any, job_id: int) -> None:
        job = session.get(Job, job_id)
        job.state, job.finished_at, job.lease_token_hash = "finished", utcnow(), None
        events.job_changed(session, build_id, events.Reactions(Settings(url=database)))

    first, second = sessions(), sessions()
    finish(first, cpu["job_id"])  # its transaction stays open
    other = threading.Thread(target=lambda: (finish(second, gpu["job_id"]), second.commit()))
    other.start()
    other.join(timeout=3)  # on Postgres it waits for the build row the first one holds
    first.commit()
    other.join(timeout=60)
    assert not other.is_alive()
    first.close()
    second.close()
    with sessions() as check:
        build = check.get(Build, build_id)
        assert build is not None
        assert build.finished_at is not None and build.verdict != "pending"
    eng.dispose()


def test_concurrent_migrations_on_postgres(postgres_url: str) -> None:  # noqa: F811
    """Several service processes starting at once on one fresh database: all reach head."""
    from service import db

    errors: list[BaseException] = []

    def run() -> None:
        try:
            db.migrate(postgres_url)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    eng = create_engine(postgres_url)
    assert count(eng, "alembic_version") == 1 and count(eng, "jobs") == 0
    eng.dispose()


# ----------------------------------------------------------------- 8 runner processes racing


@pytest.mark.timeout(300)
def test_eight_runner_processes_race_for_48_jobs_and_each_runs_once(
    start: StartService, engine: Engine, tmp_path: Path
) -> None:
    """Two service processes on one database, four runner processes on each."""
    services = [start(), start()]
    submit_commits(services[0], RACE_JOBS)
    with engine.connect() as conn:
        jobs = set(conn.scalars(text("SELECT id FROM jobs WHERE kind = 'build'")))
    assert len(jobs) == RACE_JOBS

    ctx = multiprocessing.get_context("spawn")
    go = ctx.Barrier(RACERS)
    procs = []
    for i in range(RACERS):
        out = tmp_path / f"racer-{i}.json"
        # bounded: never more claims than there are jobs
        args = (services[i % 2].url, f"racer-{i}", go, str(out), RACE_JOBS + 1)
        procs.append((ctx.Process(target=race_runner, args=args), out))
    for proc, _ in procs:
        proc.start()
    for proc, _ in procs:
        proc.join(timeout=240)
    for proc, _ in procs:
        if proc.is_alive():
            proc.kill()
    assert [proc.exitcode for proc, _ in procs] == [0] * RACERS

    per_runner = {f"racer-{i}": json.loads(out.read_text()) for i, (_, out) in enumerate(procs)}
    claimed = [job for got in per_runner.values() for job in got]
    assert len(claimed) == len(set(claimed)) == RACE_JOBS  # nobody shared a job
    assert set(claimed) == jobs
    assert sum(1 for got in per_runner.values() if got) > 1  # it was a race
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT j.id, j.state, j.attempt, r.name FROM jobs j "
                "JOIN runners r ON r.id = j.runner_id WHERE j.kind = 'build'"
            )
        ).all()
    holder = {job: name for name, got in per_runner.items() for job in got}
    assert {row[0]: (row[1], row[2], row[3]) for row in rows} == {
        job: ("finished", 1, holder[job]) for job in jobs
    }
    summary = loopback.get(f"{services[1].url}/api/builds", params={"limit": 200}).json()
    assert {b["status"] for b in summary["items"]} == {"finished"}


def test_the_grid_reads_each_builds_stored_gate(start: StartService, database: str) -> None:
    """Under required checks other than ``all`` the grid's gate column is read out of the stored
    reports' JSON (``service/web/queries.py::gates_of``): the same on both stores."""
    from service.db import make_engine
    from testkit.dashboard_data import seed_all

    svc = start(FE_CI_REQUIRE="sm_90")
    seeding = make_engine(database)
    try:
        ids = seed_all(seeding, history=0)
    finally:
        seeding.dispose()
    names = ("pass", "fail", "incomplete")
    for _ in range(2):  # first judged and stored under sm_90, then read from the stored JSON
        grid = loopback.get(f"{svc.url}/").text
        for name in names:
            build_id = ids[name]
            row = grid.split(f'id="build-{build_id}"', 1)[1].split("</tr>", 1)[0]
            cell = row.split('class="gate"', 1)[1].split("</td>", 1)[0]
            gate = report(svc, build_id)["gate"]
            assert gate["require"] == ["sm_90"]
            assert cell.endswith(f">{gate['conclusion']}</span>"), (name, cell, gate)
