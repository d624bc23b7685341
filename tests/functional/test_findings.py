"""Findings once per build: every job probes the same wheel, a reader reads each finding once.

Two jobs of one build (cpu and sm_90) post the same probe through the real runner protocol; the
probe results are written by hand (the sm_90 runner is a label here, not a GPU).
"""

from __future__ import annotations

from typing import Any

import httpx

from testkit import loopback
from testkit.registry import registry_wheel
from testkit.service import Service
from tests.helpers import register, report, submit_wheel

DSRELU = "grouped_gemm_dsrelu"
DGLU = "grouped_gemm_dglu"


def _cap(
    importable: bool, default: str | None = "None", error: str | None = None
) -> dict[str, Any]:
    return {
        "importable": importable,
        "knob": "deterministic",
        "present": importable,
        "default": default if importable else None,
        "method": "signature" if importable else None,
        "error": error,
        "entry_point": f"cudnn.{DSRELU}_wrapper_sm100",
    }


def _probe(runner: httpx.Client, caps: dict[str, Any], findings: list[dict[str, Any]]) -> int:
    lease = runner.post("/api/jobs/claim", json={}).json()
    token = lease["lease_token"]
    result = {"name": "probe", "status": "pass", "capabilities": caps, "findings": findings}
    resp = runner.post(
        f"/api/jobs/{lease['job_id']}/stages", json={"lease_token": token, "result": result}
    )
    assert resp.status_code == 201, resp.text
    assert (
        runner.post(f"/api/jobs/{lease['job_id']}/finish", json={"lease_token": token}).status_code
        == 200
    )
    return int(lease["job_id"])


def test_a_finding_seen_by_every_job_is_one_row_with_its_jobs(make_service) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90")
    runner = register(svc, "r1", arch="sm_90")
    # the previous build of the line: both subjects import, dsrelu's default follows torch
    first = submit_wheel(svc, registry_wheel("1.30.0"))  # a lower version: the previous build
    before = {DSRELU: _cap(True, "None"), DGLU: _cap(True, "False")}
    for _ in range(2):
        _probe(runner, before, [])
    assert report(svc, first)["status"] == "finished"

    second = submit_wheel(svc)
    broken = "ImportError: libfoo.so"
    after = {DSRELU: _cap(True, "False"), DGLU: _cap(False, error=broken)}
    probe_findings = [
        {
            "kind": "feature_predates_version",
            "severity": "warning",
            "subject": DSRELU,
            "message": "reports 1.27.0 but the wrapper already takes 'deterministic'",
        },
        {"kind": "import_error", "severity": "warning", "subject": DGLU, "message": broken},
    ]
    jobs = sorted(_probe(runner, after, probe_findings) for _ in range(2))
    got = report(svc, second)
    assert got["id"] == second and got["status"] == "finished"
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for f in got["findings"]:
        by_kind.setdefault(f["kind"], []).append(f)
    (predates,) = by_kind["feature_predates_version"]
    assert sorted(predates["job_ids"]) == jobs
    # the previous build imported dglu: its import error is an error, once, and not also a
    # feature regression of the same subject
    (imp,) = by_kind["import_error"]
    assert imp["severity"] == "error" and sorted(imp["job_ids"]) == jobs
    assert "previous build of this line imported it" in imp["message"]
    assert "feature_regression" not in by_kind
    (changed,) = by_kind["knob_default_changed"]
    assert changed["subject"] == DSRELU and changed["job_ids"] == []
    assert got["verdict"] == "fail"
    # the build page lists each once as well
    page = loopback.get(f"{svc.url}/builds/{second}").text
    assert page.count("reports 1.27.0 but the wrapper already takes") == 1
