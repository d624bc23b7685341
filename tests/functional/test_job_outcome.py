"""A job's outcome is a column set with its state, in one module, along the allowed transitions;
the verdict reads the column, not the reason's words; migration 0016 fills it for existing rows.
A real service on 127.0.0.1 over a real SQLite file, runners driven through the protocol."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command

from core.wire import JobKind, JobOutcome, JobState
from service.db import alembic_config
from service.jobs import transitions
from service.models import Job, utcnow
from testkit.service import Service
from testkit.wheels import make_wheel
from tests.helpers import register, report, submit_wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_wheel(tmp_path_factory.mktemp("wheel"), "9.4.0", "VALUE = 1\n")


def _job(state: JobState) -> Job:
    now = utcnow()
    return Job(id=1, kind=JobKind.gpu, state=state, attempt=1, created_at=now, stages=[])


def test_only_the_allowed_transitions_happen() -> None:
    now = utcnow()
    for state in JobState:
        for outcome in JobOutcome:
            job = _job(state)
            to = JobState.cancelled if outcome == JobOutcome.cancelled else JobState.finished
            if to in transitions.ALLOWED[state]:
                transitions.end(job, outcome, "why", now)
                assert (job.state, job.outcome, job.finished_at) == (to, outcome, now)
            else:
                with pytest.raises(transitions.NotAllowed):
                    transitions.end(job, outcome, "why", now)
                assert job.state == state and job.outcome is None
        job = _job(state)
        if JobState.queued in transitions.ALLOWED[state]:
            transitions.requeue(job, next_attempt=True)
            assert job.state == JobState.queued and job.attempt == 2
        else:
            with pytest.raises(transitions.NotAllowed):
                transitions.requeue(job, next_attempt=True)
    # an ended job never moves again; a waiting job is released to the queue, its wait counted
    assert not transitions.ALLOWED[JobState.finished] | transitions.ALLOWED[JobState.cancelled]
    job = _job(JobState.waiting)
    job.wait_deadline = job.created_at + timedelta(hours=2)
    transitions.release(job, job.created_at + timedelta(hours=5))
    assert job.state == JobState.queued
    assert job.wait_deadline == job.created_at + timedelta(hours=7)


def _finish(runner: Any, lease: dict[str, Any], **body: Any) -> None:
    done = {"lease_token": lease["lease_token"], **body}
    assert runner.post(f"/api/jobs/{lease['job_id']}/finish", json=done).status_code == 200


def test_the_verdict_reads_the_outcome_and_0016_fills_it(make_service: Any, wheel: Path) -> None:
    svc: Service = make_service()
    errored, clean = submit_wheel(svc, wheel), submit_wheel(svc, wheel)
    cpu = register(svc, "cpu")
    _finish(cpu, cpu.post("/api/jobs/claim", json={}).json(), error="the runner broke")
    lease = cpu.post("/api/jobs/claim", json={}).json()
    body = {"lease_token": lease["lease_token"], "result": {"name": "install", "status": "pass"}}
    assert cpu.post(f"/api/jobs/{lease['job_id']}/stages", json=body).status_code == 201
    _finish(cpu, lease)
    with svc.http() as http:
        cancelled = submit_wheel(svc, wheel)
        assert http.post(f"/api/builds/{cancelled}/cancel").status_code in (200, 202)
    r = report(svc, errored)
    assert r["jobs"][0]["outcome"] == "error" and r["verdict"] == "error"
    assert report(svc, clean)["jobs"][0]["outcome"] == "ran"
    assert report(svc, cancelled)["jobs"][0]["outcome"] == "cancelled"
    with svc.db() as conn:  # a reason whose words say "error" is not an error
        conn.execute("UPDATE jobs SET reason = 'error: only words' WHERE build_id = ?", (clean,))
    assert report(svc, clean)["verdict"] != "error"
    # a store from before the column: 0016 fills it from each row's state and reason
    svc.stop()
    url = f"sqlite:///{svc.data_dir / 'fe-ci.sqlite3'}"
    with svc.db() as conn:
        before = conn.execute("SELECT id, outcome FROM jobs ORDER BY id").fetchall()
        conn.execute("UPDATE jobs SET reason = '' WHERE build_id = ?", (clean,))
    command.downgrade(alembic_config(url), "0015")
    command.upgrade(alembic_config(url), "head")
    with svc.db() as conn:
        after = conn.execute("SELECT id, outcome FROM jobs ORDER BY id").fetchall()
    assert after == before and [o for _, o in after] == ["error", "ran", "cancelled"]
