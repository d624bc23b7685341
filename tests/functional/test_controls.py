"""Reruns, cancel, the wheel download, the branch badge and the comparison page, against a real
service (uvicorn on 127.0.0.1): through the API with the submit token, and bad input answered in
the one error shape (or the 404 page for a browser)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit import loopback
from testkit.dashboard_data import XSS_BRANCH
from testkit.service import SUBMIT, Service
from testkit.wheels import make_wheel
from tests.helpers import register, seeded_service, submit_wheel


def error(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    return dict(body["error"])


def finish_job(runner: httpx.Client, lease: dict[str, Any], status: str = "pass") -> None:
    """Post every stage of a leased job (each with one check and a log), then finish it."""
    for name in lease["stages"]:
        result = {
            "name": name,
            "status": status,
            "checks": [{"name": f"{name}.ran", "status": status}],
        }
        body = {"lease_token": lease["lease_token"], "result": result, "log": f"{name} log\n"}
        assert runner.post(f"/api/jobs/{lease['job_id']}/stages", json=body).status_code == 201
    done = {"lease_token": lease["lease_token"]}
    assert runner.post(f"/api/jobs/{lease['job_id']}/finish", json=done).status_code == 200


def test_a_rerun_is_a_new_build_of_the_same_wheel(service: Service, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "1.30.0", "")
    build_id = submit_wheel(service, wheel)
    with service.http() as http:
        running = http.post(f"/api/builds/{build_id}/rerun")
        error(running, 409, "conflict")  # still queued: wait for it or cancel it first
        assert service.count("builds") == 1
        error(http.post("/api/builds/4242/rerun"), 404, "not_found")
        assert http.post(f"/api/builds/{build_id}/cancel").status_code == 200
        again = http.post(f"/api/builds/{build_id}/rerun")
    assert again.status_code == 202, again.text
    new = again.json()["build_id"]
    assert new != build_id and again.json()["url"] == f"/builds/{new}"
    error(loopback.post(f"{service.url}/api/builds/{build_id}/rerun"), 401, "unauthorized")
    wrong = {"Authorization": "Bearer not-the-submit-token"}
    error(
        loopback.post(f"{service.url}/api/builds/{build_id}/rerun", headers=wrong),
        401,
        "unauthorized",
    )
    old, fresh = (loopback.get(f"{service.url}/api/builds/{i}").json() for i in (build_id, new))
    assert fresh["sha256"] == old["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert fresh["status"] == "queued" and [j["status"] for j in fresh["jobs"]] == ["queued"]
    with service.db() as conn:
        assert conn.execute("SELECT rerun_of FROM builds WHERE id = ?", (new,)).fetchone() == (
            build_id,
        )
    assert service.count("builds") == 2


def test_a_jobs_rerun_keeps_the_other_jobs_results(make_service: Any, tmp_path: Path) -> None:
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90")
    build_id = submit_wheel(svc, make_wheel(tmp_path / "w", "1.30.0", ""))
    cpu_runner, gpu_runner = register(svc, "ci-1"), register(svc, "h200-1", arch="sm_90")
    gpu_lease = gpu_runner.post("/api/jobs/claim", json={}).json()
    assert gpu_lease["kind"] == "gpu"
    finish_job(gpu_runner, gpu_lease, "fail")
    cpu_lease = cpu_runner.post("/api/jobs/claim", json={}).json()
    finish_job(cpu_runner, cpu_lease)
    old = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
    assert old["status"] == "finished" and old["verdict"] == "fail"
    with svc.http() as http:
        error(http.post(f"/api/builds/{build_id}/jobs/999/rerun"), 404, "not_found")
        resp = http.post(f"/api/builds/{build_id}/jobs/{gpu_lease['job_id']}/rerun")
    assert resp.status_code == 202, resp.text
    new = loopback.get(f"{svc.url}/api/builds/{resp.json()['build_id']}").json()
    assert new["status"] == "running" and new["verdict"] == "pending"
    by_kind = {j["kind"]: j for j in new["jobs"]}
    assert by_kind["gpu"]["status"] == "queued" and by_kind["gpu"]["stages"] == []
    kept, was = by_kind["cpu"], next(j for j in old["jobs"] if j["kind"] == "cpu")
    assert kept["id"] != was["id"] and kept["status"] == "finished" and kept["runner"] == "ci-1"
    assert kept["stages"] == was["stages"]  # the same results, checks and all
    logs = loopback.get(f"{svc.url}/api/builds/{new['id']}/logs").text
    assert "probe log" in logs  # the kept job's logs came along
    again = gpu_runner.post("/api/jobs/claim", json={}).json()
    assert again["build_id"] == new["id"] and again["kind"] == "gpu"
    finish_job(gpu_runner, again)
    done = loopback.get(f"{svc.url}/api/builds/{new['id']}").json()
    assert done["status"] == "finished" and done["verdict"] == "pass", done["verdict_reason"]


def test_the_wheel_downloads_under_its_file_name(service: Service, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "1.31.0", "")
    build_id = submit_wheel(service, wheel)
    resp = loopback.get(f"{service.url}/api/builds/{build_id}/wheel")
    assert resp.status_code == 200 and resp.content == wheel.read_bytes()
    assert resp.headers["content-disposition"] == f'attachment; filename="{wheel.name}"'
    assert resp.headers["content-type"] == "application/octet-stream"
    error(loopback.get(f"{service.url}/api/builds/77/wheel"), 404, "not_found")
    with service.http() as http:
        commit = http.post("/validate", json={"commit": "c" * 40}).json()["build_id"]
    missing = error(loopback.get(f"{service.url}/api/builds/{commit}/wheel"), 404, "not_found")
    assert "has no wheel" in missing["message"]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, dict[str, int]]]:
    with seeded_service(tmp_path_factory.mktemp("controls") / "data") as seeded:
        yield seeded


def latest_finished(svc: Service, branch: str) -> str:
    items = loopback.get(f"{svc.url}/api/builds", params={"branch": branch, "limit": 200}).json()
    return next(b["verdict"] for b in items["items"] if b["status"] == "finished")


def test_a_branch_badge_shows_its_newest_finished_verdict(seeded: Any) -> None:
    svc, _ = seeded
    want = latest_finished(svc, "refs/heads/develop")
    for path in ("/badge/develop.svg", "/badge/refs/heads/develop.svg"):
        resp = loopback.get(svc.url + path)
        assert resp.status_code == 200 and resp.headers["content-type"] == "image/svg+xml"
        assert (
            f'aria-label="fe-ci: {want}"' in resp.text
            and "no-cache" in resp.headers["cache-control"]
        )
    colours = {"fail": "#e05d44", "pass": "#4c1", "incomplete": "#a4a61d", "error": "#fe7d37"}
    assert colours[want] in loopback.get(f"{svc.url}/badge/develop.svg").text
    # a name with slashes and markup: found, and only ever shown escaped
    name = XSS_BRANCH.removeprefix("refs/heads/")
    marked = loopback.get(f"{svc.url}/badge/{name}.svg")
    assert marked.status_code == 200 and "<b>" not in marked.text
    unknown = loopback.get(f"{svc.url}/badge/release/no-such/branch.svg")
    assert unknown.status_code == 200 and unknown.headers["content-type"] == "image/svg+xml"
    assert 'aria-label="fe-ci: unknown"' in unknown.text and "#9f9f9f" in unknown.text


def test_uploads_have_a_badge_of_their_own_line(seeded: Any) -> None:
    """A wheel has no branch: ``/badge/uploads.svg`` is the newest finished upload's verdict; a
    branch named ``uploads`` is still found under ``refs/heads/``."""
    svc, _ = seeded
    items = loopback.get(f"{svc.url}/api/builds", params={"source": "wheel", "limit": 100})
    want = next(b["verdict"] for b in items.json()["items"] if b["status"] == "finished")
    commits = latest_finished(svc, "refs/heads/develop")
    assert want != commits  # so the badge cannot be a branch's by chance
    resp = loopback.get(f"{svc.url}/badge/uploads.svg")
    assert resp.status_code == 200 and resp.headers["content-type"] == "image/svg+xml"
    assert f'aria-label="fe-ci: {want}"' in resp.text, resp.text[:300]
    branch = loopback.get(f"{svc.url}/badge/refs/heads/uploads.svg")
    assert 'aria-label="fe-ci: unknown"' in branch.text


def test_two_builds_side_by_side_and_a_missing_id(seeded: Any) -> None:
    svc, ids = seeded
    page = loopback.get(f"{svc.url}/compare", params={"a": ids["pass"], "b": ids["fail"]})
    assert page.status_code == 200
    text = page.text
    assert '<strong>build: version</strong>: 1.32.0 <span class="arrow">→</span> 1.29.0' in text
    assert "feature_regression (grouped_gemm_dsrelu)" in text  # a finding only b has
    assert 'id="compare-per-subject-verdicts"' in text and 'id="compare-capabilities"' in text
    same = loopback.get(f"{svc.url}/compare", params={"a": ids["pass"], "b": ids["pass"]}).text
    assert "Nothing: the two builds read the same." in same
    html = loopback.get(
        f"{svc.url}/compare",
        params={"a": ids["pass"], "b": 99999},
        headers={"Accept": "text/html"},
    )
    assert html.status_code == 404 and "No build 99999." in html.text
    assert html.headers["content-type"].startswith("text/html")
    error(loopback.get(f"{svc.url}/compare?a=99999&b={ids['pass']}"), 404, "not_found")
    form = loopback.get(f"{svc.url}/compare?a={ids['pass']}")
    assert form.status_code == 200 and '<form class="compare-form"' in form.text
    assert SUBMIT not in form.text
