"""Two service replicas (two real ``fe-ci serve`` processes on 127.0.0.1) on one PostgreSQL
(``tests/postgres.py``): a runner long-polling one replica is woken by a job submitted to the
other, and the periodic work (here the release watcher, against ``tests/simple_index.py``) runs
on exactly one of them, and on the other once the first is gone."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, create_engine, text

from service import leader
from testkit.registry import registry_wheel
from testkit.service import Service
from testkit.waiting import eventually
from tests.helpers import logged, register
from tests.postgres import postgres_server, postgres_url  # noqa: F401 - fixtures
from tests.simple_index import SimpleIndex, serve_index

pytestmark = pytest.mark.slow

StartService = Callable[..., Service]
CLAIM_WAIT_S = 30  # the longest long poll the protocol allows (core.wire.ClaimRequest)
WOKEN_WITHIN_S = 20  # well under it: only a wake-up from the other replica answers in time


@pytest.fixture
def engine(postgres_url: str) -> Iterator[Engine]:  # noqa: F811 - the fixture's name
    eng = create_engine(postgres_url)
    yield eng
    eng.dispose()


def scalar(engine: Engine, sql: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(text(sql)).scalar()


def test_a_runner_on_one_replica_takes_a_job_submitted_to_the_other_at_once(
    make_service: StartService,
    postgres_url: str,  # noqa: F811 - the fixture's name
    engine: Engine,
) -> None:
    a, b = (make_service(FE_CI_DATABASE_URL=postgres_url) for _ in range(2))
    for svc in (a, b):
        eventually(logged(svc.log_path, "event=wake_listening"), timeout=30)
    runner = register(a, "builder-a", builder="1")
    registered = scalar(engine, "SELECT last_seen_at FROM runners")
    answer: list[httpx.Response] = []
    poll = threading.Thread(
        target=lambda: answer.append(runner.post("/api/jobs/claim", json={"wait_s": CLAIM_WAIT_S})),
        daemon=True,
    )
    poll.start()
    # the claim looked at the (empty) queue once and waits: it marked its runner seen
    eventually(lambda: scalar(engine, "SELECT last_seen_at FROM runners") > registered)
    with b.http() as http:
        build_id = http.post("/validate", json={"commit": "a" * 40}).json()["build_id"]
    poll.join(timeout=WOKEN_WITHIN_S)
    assert answer, f"the claim on replica A was not woken within {WOKEN_WITHIN_S} s"
    assert answer[0].status_code == 200, answer[0].text
    lease = answer[0].json()
    assert scalar(engine, f"SELECT build_id FROM jobs WHERE id = {lease['job_id']}") == build_id


@pytest.fixture
def index() -> Iterator[SimpleIndex]:
    with serve_index() as served:
        yield served


def test_the_periodic_work_runs_on_one_replica_and_moves_when_it_dies(
    make_service: StartService,
    postgres_url: str,  # noqa: F811 - the fixture's name
    engine: Engine,
    index: SimpleIndex,
) -> None:
    index.publish(registry_wheel("1.28.0"))
    env = {
        "FE_CI_DATABASE_URL": postgres_url,
        "FE_CI_SWEEP_INTERVAL_S": "0.2",
        "FE_CI_WATCH": "1",
        "FE_CI_WATCH_INDEX": index.url,
        "FE_CI_WATCH_INTERVAL_S": "0.2",
    }
    replicas = [make_service(**env) for _ in range(2)]

    def holders() -> list[Service]:
        return [s for s in replicas if "event=periodic_lock_taken" in s.log_path.read_text()]

    eventually(holders, timeout=30, message="a replica holding the periodic lock")
    releases = "SELECT count(*) FROM builds WHERE source = 'release'"
    eventually(lambda: scalar(engine, releases) == 1, timeout=60, message="the release's build")
    polls = index.page_polls()
    eventually(lambda: index.page_polls() >= polls + 10, timeout=30, message="more polls")
    assert len(holders()) == 1
    assert scalar(engine, releases) == 1
    (first,) = holders()
    (other,) = [s for s in replicas if s is not first]
    first.stop(signal.SIGKILL)  # its connection closes with it, and its lock
    eventually(logged(other.log_path, "event=periodic_lock_taken"), timeout=30)
    index.publish(registry_wheel("1.29.0"))
    eventually(lambda: scalar(engine, releases) == 2, timeout=60, message="the next release")


def test_a_submission_waits_for_another_replicas_admission(
    make_service: StartService,
    postgres_url: str,  # noqa: F811 - the fixture's name
    engine: Engine,
) -> None:
    """The queue's caps are counted then filled under one lock across replicas: while another
    process (this test) holds the admission lock, a submission waits for it, then goes in."""
    svc = make_service(FE_CI_DATABASE_URL=postgres_url)
    waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    answer: list[httpx.Response] = []
    with engine.connect() as other:
        other.execute(text("SELECT pg_advisory_lock(:k)"), {"k": leader.ADMISSION})

        def post() -> None:
            with svc.http() as http:
                answer.append(http.post("/validate", json={"commit": "b" * 40}))

        submit = threading.Thread(target=post, daemon=True)
        submit.start()
        eventually(lambda: scalar(engine, waiting) == 1, message="the submission waiting")
        assert not answer and scalar(engine, "SELECT count(*) FROM builds") == 0
        other.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": leader.ADMISSION})
        other.commit()
    submit.join(timeout=30)
    assert answer and answer[0].status_code == 202, answer
    assert scalar(engine, "SELECT count(*) FROM builds") == 1


def test_one_bisection_pump_at_a_time_across_replicas(
    make_service: StartService,
    postgres_url: str,  # noqa: F811 - the fixture's name
    engine: Engine,
) -> None:
    """The sweeper kicks the bisection pump each round; while another process (this test) holds
    the pump's lock, the replica's pump waits for it instead of running beside it."""
    make_service(FE_CI_DATABASE_URL=postgres_url, FE_CI_SWEEP_INTERVAL_S="0.2")
    key = leader.BISECT
    pump_waiting = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        f" AND classid = {key >> 32} AND objid = {key & 0xFFFFFFFF}"
    )
    with engine.connect() as other:
        other.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        eventually(lambda: scalar(engine, pump_waiting) == 1, message="the pump waiting")
        other.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        other.commit()
    eventually(lambda: scalar(engine, pump_waiting) == 0, message="the pump through")
