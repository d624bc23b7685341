"""A GPU job of a family whose refusal rows are intercepted decisions (sm_90) reuses the CPU job's
refusal decisions; an sm_100 job makes its own. Real service on 127.0.0.1, real SQLite, runners
driven through the protocol (the runner runs the stages its lease names; no GPU here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.service import Service
from testkit.wheels import make_wheel
from tests.helpers import register, report, submit_wheel

ROWS = 4


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_wheel(tmp_path_factory.mktemp("wheel"), "9.4.0", "VALUE = 1\n")


def _row(i: int, status: str = "pass") -> dict[str, Any]:
    return {
        "activation": "srelu" if i % 2 else "swiglu",
        "request": "env",
        "scale_bias": bool(i & 2),
        "fc1_bias": False,
        "unit_scale": False,
        "expected": "deterministic",
        "observed": "deterministic",
        "status": status,
    }


def _run(
    runner: httpx.Client, lease: dict[str, Any], *, refusal: str = "pass", error: str | None = None
) -> None:
    """Post every stage of the lease (refusal with its rows), then finish."""
    job, token = lease["job_id"], lease["lease_token"]
    for name in lease["stages"]:
        result: dict[str, Any] = {"name": name, "status": "pass", "reason": "r"}
        if name == "refusal":
            result.update(status=refusal, refusal=[_row(i, refusal) for i in range(ROWS)])
        resp = runner.post(f"/api/jobs/{job}/stages", json={"lease_token": token, "result": result})
        assert resp.status_code == 201, resp.text
    body: dict[str, Any] = {"lease_token": token, **({"error": error} if error else {})}
    assert runner.post(f"/api/jobs/{job}/finish", json=body).status_code == 200


def _job(r: dict[str, Any], family: str | None) -> dict[str, Any]:
    return next(j for j in r["jobs"] if j["family"] == family)


def _stage(job: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((s for s in job["stages"] if s["name"] == name), None)


def test_an_sm90_job_reuses_the_cpu_jobs_decisions_and_sm100_makes_its_own(
    make_service: Any, wheel: Path
) -> None:
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90,sm_100")
    build_id = submit_wheel(svc, wheel)
    cpu, h200, b200 = (
        register(svc, "cpu"),
        register(svc, "h200", arch="sm_90"),
        register(svc, "b200", arch="sm_100"),
    )
    gpu_lease = h200.post("/api/jobs/claim", json={}).json()
    assert gpu_lease["stages"] == ["install", "probe", "determinism", "numerics"]
    # a refusal posted to it anyway is not one of its stages
    bad = {"lease_token": gpu_lease["lease_token"], "result": {"name": "refusal", "status": "pass"}}
    assert h200.post(f"/api/jobs/{gpu_lease['job_id']}/stages", json=bad).status_code == 400
    _run(h200, gpu_lease)
    # the CPU job has not decided yet: the sm_90 job's reused stage says so, and is no pass
    waiting = _stage(_job(report(svc, build_id), "sm_90"), "refusal")
    assert waiting is not None and waiting["status"] == "skipped"
    cpu_lease = cpu.post("/api/jobs/claim", json={}).json()
    assert cpu_lease["kind"] == "cpu" and cpu_lease["stages"][-1] == "refusal"
    _run(cpu, cpu_lease)
    b200_lease = b200.post("/api/jobs/claim", json={}).json()
    assert b200_lease["stages"][-1] == "refusal"  # the harness rows are its own
    _run(b200, b200_lease)

    r = report(svc, build_id)
    assert r["verdict"] == "pass", r["verdict_reason"]
    reused = _stage(_job(r, "sm_90"), "refusal")
    assert reused is not None and reused["status"] == "not_applicable"
    assert f"reused from the cpu job (job {cpu_lease['job_id']})" in reused["reason"]
    assert reused["checks"] == []
    # the rows once per job that made decisions: the CPU job's and the sm_100 job's, none for sm_90
    by_job = sorted({row["job_id"] for row in r["refusal"]})
    assert by_job == sorted([cpu_lease["job_id"], b200_lease["job_id"]])
    assert len(r["refusal"]) == 2 * ROWS
    assert _stage(_job(r, "sm_100"), "refusal")["status"] == "pass"  # type: ignore[index]


def test_a_failed_cpu_refusal_fails_the_sm90_gate_too(make_service: Any, wheel: Path) -> None:
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90", FE_CI_REQUIRE="sm_90")
    build_id = submit_wheel(svc, wheel)
    cpu, h200 = register(svc, "cpu"), register(svc, "h200", arch="sm_90")
    _run(h200, h200.post("/api/jobs/claim", json={}).json())
    cpu_lease = cpu.post("/api/jobs/claim", json={}).json()
    _run(cpu, cpu_lease, refusal="fail")
    r = report(svc, build_id)
    reused = _stage(_job(r, "sm_90"), "refusal")
    assert reused is not None and reused["status"] == "fail"
    assert r["verdict"] == "fail" and r["gate"]["conclusion"] == "failure"


def test_a_cpu_job_without_decisions_gives_refusal_back_to_an_unclaimed_gpu_job(
    make_service: Any, wheel: Path
) -> None:
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90")
    build_id = submit_wheel(svc, wheel)
    cpu = register(svc, "cpu")
    lease = cpu.post("/api/jobs/claim", json={}).json()
    lease["stages"] = ["install"]  # the runner died in the install stage
    _run(cpu, lease, error="the install stage crashed")
    h200 = register(svc, "h200", arch="sm_90")
    gpu_lease = h200.post("/api/jobs/claim", json={}).json()
    assert gpu_lease["stages"][-1] == "refusal"  # the build keeps its refusal coverage
    _run(h200, gpu_lease)
    r = report(svc, build_id)
    own = _stage(_job(r, "sm_90"), "refusal")
    assert own is not None and own["status"] == "pass" and "reused" not in own["reason"]
    assert {row["job_id"] for row in r["refusal"]} == {gpu_lease["job_id"]}
    assert r["verdict"] == "error"  # the CPU job's error still holds it


def test_a_gpu_job_claimed_before_the_cpu_job_errored_says_its_decisions_were_never_made(
    make_service: Any, wheel: Path
) -> None:
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90", FE_CI_REQUIRE="sm_90")
    build_id = submit_wheel(svc, wheel)
    cpu, h200 = register(svc, "cpu"), register(svc, "h200", arch="sm_90")
    _run(h200, h200.post("/api/jobs/claim", json={}).json())
    lease = cpu.post("/api/jobs/claim", json={}).json()
    lease["stages"] = ["install"]
    _run(cpu, lease, error="lost")
    r = report(svc, build_id)
    reused = _stage(_job(r, "sm_90"), "refusal")
    assert reused is not None and reused["status"] == "error"
    assert "ended without its decisions" in reused["reason"]
    assert r["verdict"] == "error" and r["gate"]["conclusion"] == "failure"
