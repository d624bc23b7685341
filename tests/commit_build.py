"""A commit build driven through the runner protocol, as its runners would: the builder uploads a
wheel, then the sm_90 job and the CPU job report (no GPU here: the GPU job's results are what an
sm_90 runner would post). Each step takes the client of the replica it should go through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from core.frontend_refusals import REUSED_CHECK
from testkit.service import Service
from testkit.wheels import make_wheel
from tests.helpers import push, register, send

CONFIG = "b4_h16_s2048_d128_causal"


def post_stage(client: httpx.Client, lease: dict[str, Any], result: dict[str, Any]) -> None:
    body = {"lease_token": lease["lease_token"], "result": result}
    resp = client.post(f"/api/jobs/{lease['job_id']}/stages", json=body)
    assert resp.status_code == 201, resp.text


def finish(client: httpx.Client, lease: dict[str, Any]) -> None:
    resp = client.post(
        f"/api/jobs/{lease['job_id']}/finish", json={"lease_token": lease["lease_token"]}
    )
    assert resp.status_code == 200, resp.text


def claim(client: httpx.Client) -> dict[str, Any]:
    lease = client.post("/api/jobs/claim", json={}).json()
    assert lease.get("job_id"), lease
    return lease


def probe_result(present: bool = True, blackwell: bool = False) -> dict[str, Any]:
    cap = {"importable": True, "knob": "use_deterministic_algorithm", "present": present}
    caps = {"sdpa_bwd": cap}
    if blackwell:  # a knob only an sm_100 job can check
        caps["grouped_gemm_dsrelu"] = {"importable": True, "knob": "deterministic", "present": True}
    return {"name": "probe", "status": "pass", "capabilities": caps}


def start_commit_build(svc: Service, tmp_path: Path) -> int:
    """A pushed commit whose builder uploaded its wheel; the build's id."""
    build_id = int(send(svc, push()).json()["build_id"])
    builder = register(svc, "builder", builder="1")
    lease = claim(builder)
    assert lease["kind"] == "build"
    wheel = make_wheel(tmp_path / "w", "1.32.0", "")
    with wheel.open("rb") as fh:
        resp = builder.post(
            lease["artifact_url"],
            files={"wheel": (wheel.name, fh, "application/octet-stream")},
            headers={"X-Lease-Token": lease["lease_token"], "X-Python-Tag": "py3"},
        )
    assert resp.status_code == 201, resp.text
    post_stage(builder, lease, {"name": "build", "status": "pass"})
    finish(builder, lease)
    return build_id


def run_gpu_job(gpu: httpx.Client, sdpa: str, blackwell: bool = False) -> dict[str, Any]:
    """The sm_90 job's stages posted; its lease (not finished)."""
    lease = claim(gpu)
    assert lease["kind"] == "gpu" and lease["family"] == "sm_90"
    post_stage(gpu, lease, {"name": "install", "status": "pass"})
    post_stage(gpu, lease, probe_result(blackwell=blackwell))
    detail = {
        "pass": "deterministic arm byte-exact over 24 runs; control varied in 7 of 7",
        "fail": "deterministic arm varied: dq differed from run 0 in 3 of 23 runs",
    }[sdpa]
    metrics = {"config": {"name": CONFIG}, "config_name": CONFIG}
    checks = [
        {"name": "sdpa_bwd.deterministic", "status": sdpa, "detail": detail, "metrics": metrics},
        {
            "name": "grouped_gemm_dsrelu.deterministic",
            "status": "skipped",
            "detail": "needs sm_100",
        },
    ]
    post_stage(gpu, lease, {"name": "determinism", "status": sdpa, "checks": checks})
    post_stage(gpu, lease, {"name": "numerics", "status": "pass"})
    assert lease["refusal_scope"] == "frontend"  # it reuses the CPU job's consumer decisions
    post_stage(gpu, lease, {"name": "refusal", "status": "not_applicable", "checks": [
        {"name": REUSED_CHECK, "status": "not_applicable", "detail": "not run here"}]})  # fmt: skip
    return lease


def run_cpu_job(cpu: httpx.Client, blackwell: bool = False) -> dict[str, Any]:
    """The CPU job's stages posted; its lease (not finished)."""
    lease = claim(cpu)
    assert lease["kind"] == "cpu"
    for stage in (
        {"name": "install", "status": "pass"},
        probe_result(blackwell=blackwell),
        {"name": "refusal", "status": "pass"},
    ):
        post_stage(cpu, lease, stage)
    return lease


def drive_commit_build(svc: Service, tmp_path: Path, sdpa: str, blackwell: bool = False) -> int:
    """The whole build through one service; no sm_100 runner exists, so that job stays queued."""
    build_id = start_commit_build(svc, tmp_path)
    gpu = register(svc, "gpu-1", arch="sm_90")
    finish(gpu, run_gpu_job(gpu, sdpa, blackwell))
    cpu = register(svc, "cpu-1")
    finish(cpu, run_cpu_job(cpu, blackwell))
    return build_id
