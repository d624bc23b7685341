"""Reruns bounded, against a real service on 127.0.0.1: a cap on the builds the submit token has
queued and on all queued builds (429 with ``Retry-After``, in the one error shape), held when the
requests come at once; and a job rerun copies at most ``LOG_COPY_CHARS`` of each kept log."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx

from service.jobs.reruns import LOG_COPY_CHARS
from testkit import loopback
from testkit.service import Service
from testkit.wheels import make_wheel
from tests.helpers import register, submit_wheel


def cancelled_build(svc: Service, tmp_path: Path) -> int:
    build_id = submit_wheel(svc, make_wheel(tmp_path / "w", "1.30.0", ""))
    with svc.http() as http:
        assert http.post(f"/api/builds/{build_id}/cancel").status_code == 200
    return build_id


def refused(resp: httpx.Response, setting: str, limit: int) -> None:
    assert resp.status_code == 429, resp.text
    assert resp.headers["retry-after"] == "60"
    error = resp.json()["error"]
    assert set(error) == {"code", "message", "detail"} and error["code"] == "too_many_queued"
    assert error["detail"] == {setting: limit, "queued": limit}, error


def test_reruns_past_the_tokens_cap_are_refused_even_at_once(
    make_service: Any, tmp_path: Path
) -> None:
    """Was: 200 reruns in 5.9 s queued 200 builds. Twenty at once against a cap of three: three
    queued, seventeen refused; a submission too; a cancelled one makes room again."""
    svc: Service = make_service(FE_CI_MAX_QUEUED_PER_TOKEN="3")
    build_id = cancelled_build(svc, tmp_path)
    answers: list[httpx.Response] = []

    def rerun() -> None:
        with svc.http() as http:
            answers.append(http.post(f"/api/builds/{build_id}/rerun"))

    threads = [threading.Thread(target=rerun) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    accepted = [r for r in answers if r.status_code == 202]
    assert len(answers) == 20 and len(accepted) == 3, [r.status_code for r in answers]
    for resp in answers:
        if resp.status_code != 202:
            refused(resp, "max_queued_per_token", 3)
    assert svc.count("builds") == 4
    wheel = next((tmp_path / "w").glob("*.whl"))
    with svc.http() as http, wheel.open("rb") as fh:
        refused(
            http.post("/validate", files={"wheel": (wheel.name, fh)}), "max_queued_per_token", 3
        )
    assert svc.count("builds") == 4
    assert len(list((svc.data_dir / "blobs").rglob("*.whl"))) == 1  # the refused upload is gone
    with svc.http() as http:
        assert http.post(f"/api/builds/{accepted[0].json()['build_id']}/cancel").status_code == 200
        assert http.post(f"/api/builds/{build_id}/rerun").status_code == 202


def test_all_queued_builds_are_capped(make_service: Any, tmp_path: Path) -> None:
    svc: Service = make_service(FE_CI_MAX_QUEUED_BUILDS="2")
    build_id = cancelled_build(svc, tmp_path)
    with svc.http() as http:
        for _ in range(2):
            assert http.post(f"/api/builds/{build_id}/rerun").status_code == 202
        refused(http.post(f"/api/builds/{build_id}/rerun"), "max_queued_builds", 2)
    assert svc.count("builds") == 3


def finish_with_logs(runner: httpx.Client, lease: dict[str, Any], chars: int) -> None:
    for name in lease["stages"]:
        log = f"{name} begins\n" + "x" * chars + f"\n{name} ends\n"
        body = {
            "lease_token": lease["lease_token"],
            "result": {"name": name, "status": "pass"},
            "log": log,
        }
        assert runner.post(f"/api/jobs/{lease['job_id']}/stages", json=body).status_code == 201
    done = {"lease_token": lease["lease_token"]}
    assert runner.post(f"/api/jobs/{lease['job_id']}/finish", json=done).status_code == 200


def test_a_job_rerun_copies_each_log_within_a_cap(make_service: Any, tmp_path: Path) -> None:
    """Was: each job rerun copied every kept stage's whole log (up to 64 KiB each: 50 reruns
    added 9.6 MB). The copy keeps the log's end, under a note naming the original build."""
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90")
    build_id = submit_wheel(svc, make_wheel(tmp_path / "w", "1.30.0", ""))
    cpu_runner, gpu_runner = register(svc, "ci-1"), register(svc, "h200-1", arch="sm_90")
    gpu_lease = gpu_runner.post("/api/jobs/claim", json={}).json()
    finish_with_logs(gpu_runner, gpu_lease, 100)
    finish_with_logs(cpu_runner, cpu_runner.post("/api/jobs/claim", json={}).json(), 50_000)
    with svc.http() as http:
        resp = http.post(f"/api/builds/{build_id}/jobs/{gpu_lease['job_id']}/rerun")
    assert resp.status_code == 202, resp.text
    new = resp.json()["build_id"]
    with svc.db() as conn:
        rows = conn.execute(
            "SELECT build_id, length(text) FROM stage_logs WHERE build_id IN (?, ?)",
            (build_id, new),
        ).fetchall()
    copied = [n for b, n in rows if b == new]
    assert copied and max(copied) <= LOG_COPY_CHARS, rows
    assert max(n for b, n in rows if b == build_id) > 50_000  # the original keeps its whole log
    logs = loopback.get(f"{svc.url}/api/builds/{new}/logs").text
    assert f"the whole log is build {build_id}'s" in logs and "probe ends" in logs
