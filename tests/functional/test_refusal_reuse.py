"""A GPU job of a family whose consumer rows are intercepted decisions (sm_90) runs only the
frontend's own refusal rows and reuses the CPU job's decisions for the consumer's; an sm_100 job
makes its own. Real service on 127.0.0.1, real SQLite, runners driven through the protocol: a
runner here posts what its lease asks for, since the frontend rows run only on an sm_90 GPU,
which this host lacks (``runner.inside.refusal.frontend_only`` is tested on the real wheel in
tests/functional/test_torch_flag_wheels.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.frontend_refusals import CHECK_PREFIX, FRONTEND_REFUSALS, REUSED_CHECK
from testkit.service import ROOT, Service
from testkit.wheels import make_wheel
from tests.helpers import register, report, submit_wheel

ROWS = 4
DSA_ROWS = [r.check for r in FRONTEND_REFUSALS if "sm_90" in r.families and "dsa" in r.name]
# not covered on the H200's cuDNN 9.19: skipped there, as docs/measurements/h200-stream-2026-12-05
CONV_ROWS = [r.check for r in FRONTEND_REFUSALS if "sm_90" in r.families and "conv" in r.name]
KNOBS = json.loads((ROOT / "core" / "surface_ledger.json").read_text())["releases"]["1.32.0"][
    "knobs"
]


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


def _frontend_only(status: str) -> dict[str, Any]:
    """What the refusal stage of an sm_90 GPU with the lease's scope "frontend" posts: its DSA
    rows as they ran, and the marker for the consumer's rows it did not make."""
    checks = [{"name": n, "status": status, "detail": "raised as owed"} for n in DSA_ROWS]
    checks += [{"name": n, "status": "skipped", "detail": "needs a newer cuDNN"} for n in CONV_ROWS]
    checks.append({"name": REUSED_CHECK, "status": "not_applicable", "detail": "not run here"})
    return {"status": status, "reason": "frontend rows only", "checks": checks, "refusal": []}


def _run(
    runner: httpx.Client, lease: dict[str, Any], *, refusal: str = "pass", error: str | None = None
) -> None:
    """Post every stage of the lease (refusal as its scope asks, the probe with 1.32.0's
    surface), then finish."""
    job, token = lease["job_id"], lease["lease_token"]
    for name in lease["stages"]:
        result: dict[str, Any] = {"name": name, "status": "pass", "reason": "r"}
        if name == "probe":
            result["surface"] = KNOBS
        if name == "refusal" and lease["refusal_scope"] == "frontend":
            result.update(_frontend_only(refusal))
        elif name == "refusal":
            result.update(status=refusal, refusal=[_row(i, refusal) for i in range(ROWS)])
        resp = runner.post(f"/api/jobs/{job}/stages", json={"lease_token": token, "result": result})
        assert resp.status_code == 201, resp.text
    body: dict[str, Any] = {"lease_token": token, **({"error": error} if error else {})}
    assert runner.post(f"/api/jobs/{job}/finish", json=body).status_code == 200


def _job(r: dict[str, Any], family: str | None) -> dict[str, Any]:
    return next(j for j in r["jobs"] if j["family"] == family)


def _stage(job: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((s for s in job["stages"] if s["name"] == name), None)


def _check(stage: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in stage["checks"] if c["name"] == name)


def test_an_sm90_job_runs_the_frontend_rows_and_reuses_the_cpu_jobs_decisions(
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
    assert gpu_lease["stages"] == ["install", "probe", "determinism", "numerics", "refusal"]
    assert gpu_lease["refusal_scope"] == "frontend"  # the consumer's rows are the CPU job's
    _run(h200, gpu_lease)
    # the CPU job has not decided yet: the reused rows say so, and are no pass
    waiting = _stage(_job(report(svc, build_id), "sm_90"), "refusal")
    assert waiting is not None and waiting["status"] == "skipped"
    assert _check(waiting, REUSED_CHECK)["status"] == "skipped"
    assert _check(waiting, DSA_ROWS[0])["status"] == "pass"  # its own rows ran
    cpu_lease = cpu.post("/api/jobs/claim", json={}).json()
    assert cpu_lease["kind"] == "cpu" and cpu_lease["stages"][-1] == "refusal"
    assert cpu_lease["refusal_scope"] == "all"
    _run(cpu, cpu_lease)
    b200_lease = b200.post("/api/jobs/claim", json={}).json()
    assert b200_lease["stages"][-1] == "refusal" and b200_lease["refusal_scope"] == "all"
    _run(b200, b200_lease)

    r = report(svc, build_id)
    assert r["verdict"] == "pass", r["verdict_reason"]
    stage = _stage(_job(r, "sm_90"), "refusal")
    assert stage is not None and stage["status"] == "pass"
    # which rows ran here and which were reused, in the stage's reason and its checks
    assert CONV_ROWS, "the causal_conv1d rows of sm_90"
    ran = f"ran here: {', '.join(DSA_ROWS)} (pass); {', '.join(CONV_ROWS)} (skipped);"
    assert ran in stage["reason"]
    assert f"reused from the cpu job (job {cpu_lease['job_id']})" in stage["reason"]
    reused = _check(stage, REUSED_CHECK)
    assert reused["status"] == "not_applicable"
    assert f"reused from the cpu job (job {cpu_lease['job_id']})" in reused["detail"]
    assert _job(r, "sm_90")["refusal_from"] == cpu_lease["job_id"]
    # the consumer's rows once per job that made decisions: the CPU job's and the sm_100 job's
    by_job = sorted({row["job_id"] for row in r["refusal"]})
    assert by_job == sorted([cpu_lease["job_id"], b200_lease["job_id"]])
    assert len(r["refusal"]) == 2 * ROWS
    assert _stage(_job(r, "sm_100"), "refusal")["status"] == "pass"  # type: ignore[index]
    # the DSA knobs the sm_90 job's rows checked are covered, refusal-only
    dsa = [row for row in r["coverage"]["rows"] if row["entry_point"].endswith(
        ("sparse_attention_backward_wrapper", "indexer_backward_wrapper"))
        and row["knob"] == "deterministic" and "deepseek" in row["entry_point"]]  # fmt: skip
    assert len(dsa) == 2
    assert all(row["status"] == "refusal_only" and "sm_90" in row["why"] for row in dsa), dsa


def test_a_failing_frontend_row_on_sm90_fails_the_build(make_service: Any, wheel: Path) -> None:
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90", FE_CI_REQUIRE="sm_90")
    build_id = submit_wheel(svc, wheel)
    cpu, h200 = register(svc, "cpu"), register(svc, "h200", arch="sm_90")
    _run(cpu, cpu.post("/api/jobs/claim", json={}).json())
    _run(h200, h200.post("/api/jobs/claim", json={}).json(), refusal="fail")
    r = report(svc, build_id)
    stage = _stage(_job(r, "sm_90"), "refusal")
    assert stage is not None and stage["status"] == "fail"
    assert _check(stage, REUSED_CHECK)["status"] == "not_applicable"  # the CPU's rows passed
    assert r["verdict"] == "fail" and r["gate"]["conclusion"] == "failure"
    assert any(c["name"].startswith(CHECK_PREFIX) for c in stage["checks"])


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
    assert gpu_lease["refusal_scope"] == "all"  # the build keeps its consumer rows' coverage
    assert gpu_lease["probe_surface"] is True  # and its surface (service/jobs/surface_reuse.py)
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
    assert _check(reused, REUSED_CHECK)["status"] == "error"
    assert _check(reused, DSA_ROWS[0])["status"] == "pass"  # its own rows still count
    assert r["verdict"] == "error" and r["gate"]["conclusion"] == "failure"
