"""A finished build's report is stored once, served with an ETag, and answers 304 when current."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

from service.results.stored_reports import REPORT_REVISION
from testkit import loopback
from testkit.service import Service, service_env
from tests.helpers import register, stage_body, submit_wheel


def _finish_cpu_job(runner: httpx.Client) -> None:
    lease = runner.post("/api/jobs/claim", json={}).json()
    token, job = lease["lease_token"], lease["job_id"]
    assert runner.post(f"/api/jobs/{job}/stages", json=stage_body(token)).status_code == 201
    assert runner.post(f"/api/jobs/{job}/finish", json={"lease_token": token}).status_code == 200


def test_a_finished_report_is_stored_and_revalidated_by_etag(service: Service) -> None:
    runner = register(service, "r1")
    build_id = submit_wheel(service)
    url = f"{service.url}/api/builds/{build_id}"
    # while the build runs the report changes: an ETag, nothing stored
    queued = loopback.get(url)
    assert queued.status_code == 200 and queued.json()["status"] == "queued"
    assert service.count("finished_reports") == 0
    _finish_cpu_job(runner)
    with service.db() as conn:
        (revision, etag, body) = conn.execute(
            "SELECT revision, etag, body FROM finished_reports WHERE build_id = ?", (build_id,)
        ).fetchone()
    assert revision == REPORT_REVISION
    got = loopback.get(url)
    assert got.status_code == 200 and got.json()["status"] == "finished"
    assert got.headers["etag"] == etag != queued.headers["etag"]
    assert got.content == body.encode()
    same = loopback.get(url, headers={"If-None-Match": etag})
    assert same.status_code == 304 and same.content == b"" and same.headers["etag"] == etag
    stale = loopback.get(url, headers={"If-None-Match": queued.headers["etag"]})
    assert stale.status_code == 200 and stale.json()["id"] == build_id
    # a missing build is still the one error shape
    missing = loopback.get(f"{service.url}/api/builds/{build_id + 100}")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_the_stored_report_is_what_is_served_unless_its_revision_is_old(service: Service) -> None:
    """Tampering with the stored rows (before any read, so no process holds them in memory)
    shows which is served: the stored body, or a fresh report when the revision is old."""
    runner = register(service, "r1")
    served, recomputed = submit_wheel(service), submit_wheel(service)
    _finish_cpu_job(runner)
    _finish_cpu_job(runner)
    marker = '{"stored": true}'
    with service.db() as conn:
        conn.execute("UPDATE finished_reports SET body = ? WHERE build_id = ?", (marker, served))
        conn.execute(
            "UPDATE finished_reports SET body = ?, revision = ? WHERE build_id = ?",
            (marker, REPORT_REVISION - 1, recomputed),
        )
    assert loopback.get(f"{service.url}/api/builds/{served}").json() == {"stored": True}
    fresh = loopback.get(f"{service.url}/api/builds/{recomputed}").json()
    assert fresh["id"] == recomputed and fresh["status"] == "finished"
    with service.db() as conn:
        (revision,) = conn.execute(
            "SELECT revision FROM finished_reports WHERE build_id = ?", (recomputed,)
        ).fetchone()
    assert revision == REPORT_REVISION


def _computed(svc: Service, build_id: int) -> int:
    """How often the service assembled the build's report (its debug log says each time)."""
    return svc.log_path.read_text().count(f"event=report_computed build={build_id} ")


def test_a_report_is_computed_once_per_job_event_and_never_on_a_read(tmp_path: Path) -> None:
    """Submitting and finishing are the build's events (two computations for a one-job wheel);
    a claim of a wheel's job and its stage posts compute nothing, and a finished build's page,
    JUnit and API read the stored report: a stored body changed behind the service's back is
    what they show."""
    data = tmp_path / "data"
    argv = [sys.executable, "-m", "cli.main", "serve", "--port", "{port}"]
    svc = Service(data, service_env(data), command=[*argv, "--log-level", "debug"]).start()
    try:
        runner = register(svc, "r1")
        build_id = submit_wheel(svc)
        assert _computed(svc, build_id) == 1
        lease = runner.post("/api/jobs/claim", json={}).json()
        token, job = lease["lease_token"], lease["job_id"]
        for stage in ("install", "probe", "refusal"):
            body = stage_body(token, stage)
            assert runner.post(f"/api/jobs/{job}/stages", json=body).status_code == 201
        assert _computed(svc, build_id) == 1
        assert (
            runner.post(f"/api/jobs/{job}/finish", json={"lease_token": token}).status_code == 200
        )
        assert _computed(svc, build_id) == 2
        with svc.db() as conn:
            (body,) = conn.execute(
                "SELECT body FROM finished_reports WHERE build_id = ?", (build_id,)
            ).fetchone()
            stored = json.loads(body)
            stored["verdict_reason"] = "as stored, not recomputed"
            conn.execute(
                "UPDATE finished_reports SET body = ? WHERE build_id = ?",
                (json.dumps(stored), build_id),
            )
        for _ in range(3):
            page = loopback.get(f"{svc.url}/builds/{build_id}")
            junit = loopback.get(f"{svc.url}/builds/{build_id}/junit.xml")
            api = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
            assert "as stored, not recomputed" in page.text
            assert api["verdict_reason"] == "as stored, not recomputed"
            assert junit.status_code == 200
        assert _computed(svc, build_id) == 2
    finally:
        svc.stop()


def test_a_report_stored_before_the_doors_bounds_is_still_read(service: Service) -> None:
    """A finished build whose stored report and rows hold a text past today's bounds (kept
    before the runner protocol refused such posts): its page, JUnit and API still answer, from
    the rows, instead of failing to read the stored report."""
    runner = register(service, "r1")
    build_id = submit_wheel(service)
    _finish_cpu_job(runner)
    old = "kept before the bounds " + "x" * (1 << 20)
    with service.db() as conn:
        (body,) = conn.execute(
            "SELECT body FROM finished_reports WHERE build_id = ?", (build_id,)
        ).fetchone()
        stored = json.loads(body)
        stored["jobs"][0]["stages"][0]["reason"] = old
        conn.execute(
            "UPDATE finished_reports SET body = ? WHERE build_id = ?",
            (json.dumps(stored), build_id),
        )
        conn.execute(  # the stage's column and its stored result alike
            "UPDATE stages SET reason = ?, result = json_set(result, '$.reason', ?)", (old, old)
        )
    page = loopback.get(f"{service.url}/builds/{build_id}")
    assert page.status_code == 200 and "kept before the bounds" in page.text
    junit = loopback.get(f"{service.url}/builds/{build_id}/junit.xml")
    assert junit.status_code == 200 and b"kept before the bounds" in junit.content
    api = loopback.get(f"{service.url}/api/builds/{build_id}")
    assert api.status_code == 200 and api.json()["jobs"][0]["stages"][0]["reason"] == old
    assert "event=stored_report_reassembled" in service.log_path.read_text()
