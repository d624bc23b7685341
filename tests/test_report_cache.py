"""A finished build's report is stored once, served with an ETag, and answers 304 when current."""

from __future__ import annotations

import httpx

from service.stored_reports import REPORT_REVISION
from testkit.service import Service
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
    queued = httpx.get(url)
    assert queued.status_code == 200 and queued.json()["status"] == "queued"
    assert service.count("finished_reports") == 0
    _finish_cpu_job(runner)
    with service.db() as conn:
        (revision, etag, body) = conn.execute(
            "SELECT revision, etag, body FROM finished_reports WHERE build_id = ?", (build_id,)
        ).fetchone()
    assert revision == REPORT_REVISION
    got = httpx.get(url)
    assert got.status_code == 200 and got.json()["status"] == "finished"
    assert got.headers["etag"] == etag != queued.headers["etag"]
    assert got.content == body.encode()
    same = httpx.get(url, headers={"If-None-Match": etag})
    assert same.status_code == 304 and same.content == b"" and same.headers["etag"] == etag
    stale = httpx.get(url, headers={"If-None-Match": queued.headers["etag"]})
    assert stale.status_code == 200 and stale.json()["id"] == build_id
    # a missing build is still the one error shape
    missing = httpx.get(f"{service.url}/api/builds/{build_id + 100}")
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
    assert httpx.get(f"{service.url}/api/builds/{served}").json() == {"stored": True}
    fresh = httpx.get(f"{service.url}/api/builds/{recomputed}").json()
    assert fresh["id"] == recomputed and fresh["status"] == "finished"
    with service.db() as conn:
        (revision,) = conn.execute(
            "SELECT revision FROM finished_reports WHERE build_id = ?", (recomputed,)
        ).fetchone()
    assert revision == REPORT_REVISION
