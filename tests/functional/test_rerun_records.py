"""A measurement counts once: a job rerun keeps the other jobs' determinism records as copies,
and a copy never becomes "the previous comparable build", a point of the cost band or of the
trends. Through a real service; the determinism stage is a real CPU measurement under a GPU
subject's name (``tests/fakesubjects.py``), posted as an sm_90 runner posts it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from alembic import command

from runner.inside import plan
from service.db import alembic_config
from testkit import loopback
from testkit.service import Service
from testkit.wheels import make_wheel
from tests.fakesubjects import SDPA_CONFIGS, posted_stage
from tests.helpers import register, submit_wheel

RERUNS = 10  # the cost band's window (core.history.COST_WINDOW)
S2048 = SDPA_CONFIGS[1]


def finish_cpu(runner: httpx.Client) -> None:
    lease = runner.post("/api/jobs/claim", json={}).json()
    assert lease["kind"] == "cpu", lease
    for name in lease["stages"]:
        result = {
            "name": name,
            "status": "pass",
            "checks": [{"name": f"{name}.ran", "status": "pass"}],
        }
        body = {"lease_token": lease["lease_token"], "result": result}
        assert runner.post(f"/api/jobs/{lease['job_id']}/stages", json=body).status_code == 201
    done = {"lease_token": lease["lease_token"]}
    assert runner.post(f"/api/jobs/{lease['job_id']}/finish", json=done).status_code == 200


def gpu_build(svc: Service, gpu: httpx.Client, wheel: Path, ratio: float) -> dict[str, Any]:
    """A build whose sm_90 job measures sdpa_bwd where its lease says, at cost ``ratio``."""
    submit_wheel(svc, wheel)
    return gpu_job(svc, gpu, ratio)


def gpu_job(svc: Service, gpu: httpx.Client, ratio: float) -> dict[str, Any]:
    """The next sm_90 job: sdpa_bwd measured where its lease says, at cost ``ratio``."""
    lease = gpu.post("/api/jobs/claim", json={}).json()
    assert lease["kind"] == "gpu", lease
    at = plan.comparison_points({"comparison": lease["comparison"]}, "sm_90").get("sdpa_bwd")
    stage = posted_stage(
        "sdpa_bwd", SDPA_CONFIGS, set(SDPA_CONFIGS[1:]), compare_at=at, ratio=ratio
    )
    body = {"lease_token": lease["lease_token"], "result": stage}
    assert gpu.post(f"/api/jobs/{lease['job_id']}/stages", json=body).status_code == 201
    assert (
        gpu.post(
            f"/api/jobs/{lease['job_id']}/finish", json={"lease_token": lease["lease_token"]}
        ).status_code
        == 200
    )
    report: dict[str, Any] = loopback.get(f"{svc.url}/api/builds/{lease['build_id']}").json()
    return report


def test_a_job_reruns_copies_never_count_again(
    make_service: Callable[..., Service], tmp_path: Path
) -> None:
    svc = make_service(FE_CI_GPU_ARCHS="sm_90")
    wheel = make_wheel(tmp_path / "w", "1.32.0", "")
    cpu, gpu = register(svc, "ci-1"), register(svc, "h200", arch="sm_90")
    first = gpu_build(svc, gpu, wheel, ratio=1.5)
    finish_cpu(cpu)
    (measured,) = first["history"]
    assert measured["config"] == S2048 and measured["cost_ratio"] == 1.5
    cpu_job = next(j["id"] for j in first["jobs"] if j["kind"] == "cpu")
    reruns = []
    with svc.http() as http:
        for _ in range(RERUNS):  # each keeps the GPU job's record; then cancelled, as in the attack
            resp = http.post(f"/api/builds/{first['id']}/jobs/{cpu_job}/rerun")
            assert resp.status_code == 202, resp.text
            reruns.append(resp.json()["build_id"])
            assert http.post(f"/api/builds/{reruns[-1]}/cancel").status_code == 200
    # each rerun's report still shows the measurement its kept job made
    kept = loopback.get(f"{svc.url}/api/builds/{reruns[-1]}").json()["history"]
    assert [r["cost_ratio"] for r in kept] == [1.5]

    nxt = gpu_build(svc, gpu, wheel, ratio=1.6)
    (row,) = nxt["history"]
    # compared with the build that measured, its band made of that one measurement
    assert row["previous_build_id"] == first["id"], row
    assert row["cost_builds"] == 1 and row["cost_median"] == 1.5, row
    trends = loopback.get(f"{svc.url}/trends").text
    for rerun in reruns:  # the trends draw the measurement once, at the build that made it
        assert f"build {rerun} sm_90 at" not in trends
    assert f"build {first['id']} sm_90 at {S2048}: 1.50x" in trends
    # a job that runs again in a rerun measures afresh: its record is the rerun's own
    finish_cpu(cpu)
    nxt_gpu = next(j["id"] for j in nxt["jobs"] if j["kind"] == "gpu")
    with svc.http() as http:
        again = http.post(f"/api/builds/{nxt['id']}/jobs/{nxt_gpu}/rerun").json()["build_id"]
    measured_again = gpu_job(svc, gpu, ratio=1.55)
    assert measured_again["id"] == again
    assert measured_again["history"][0]["previous_build_id"] == nxt["id"]
    assert measured_again["history"][0]["cost_builds"] == 2
    marks = [(first["id"], 0), *[(b, 1) for b in reruns], (nxt["id"], 0), (again, 0)]
    assert copied(svc) == marks
    # a store from before the mark: migration 0015 finds the copies among its records
    svc.stop()
    url = f"sqlite:///{svc.data_dir / 'fe-ci.sqlite3'}"
    command.downgrade(alembic_config(url), "0014")
    command.upgrade(alembic_config(url), "head")
    assert copied(svc) == marks


def copied(svc: Service) -> list[tuple[int, int]]:
    with svc.db() as conn:
        rows = conn.execute("SELECT build_id, copied FROM determinism_records ORDER BY build_id")
        return [tuple(r) for r in rows.fetchall()]
