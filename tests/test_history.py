"""Deterministic bits and the cost of determinism across builds, through the real service.

No GPU here: the deterministic arm is a real CPU measurement (``tests/fakesubjects.py``) under the
name of a GPU subject, posted through the runner protocol as an sm_90 runner would post it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from core import history
from core.wire import (
    BuildReport,
    BuildStatus,
    JobKind,
    JobReport,
    JobState,
    StageResult,
    Verdict,
)
from runner.inside import bits
from runner.inside.measure import Settings, measure_subject
from testkit.service import Service
from testkit.wheels import make_wheel
from tests.fakesubjects import FakeSubject, Reduction, floats
from tests.helpers import register, submit_wheel

CPU = torch.device("cpu")
ENV = {"gpu": "NVIDIA H200", "torch": torch.__version__, "cudnn_backend": "91100"}


def measured(nudge: float = 0.0, ratio: float | None = None) -> dict[str, Any]:
    """The determinism stage of one real CPU measurement under the name ``sdpa_bwd``; ``nudge``
    changes the inputs' first value (so the output bytes change), ``ratio`` sets the cost."""

    def make(_name: str) -> Reduction:
        w, x = floats(4096, 21)
        x[0] += nudge
        return Reduction(w, x)

    out = measure_subject(FakeSubject(make, name="sdpa_bwd"), CPU, Settings())
    check = out.check
    assert check["status"] == "pass", check["detail"]
    check["metrics"]["comparable"] = bits.comparable(
        "sdpa_bwd", out.config or "", "sm_90", ENV, "inputs-v1"
    )
    if ratio is not None:
        check["metrics"]["cost"]["ratio"] = ratio
    return {"name": "determinism", "status": "pass", "checks": [check], "drift": out.drift}


def gpu_build(svc: Service, gpu: httpx.Client, wheel: Path, result: dict[str, Any]) -> dict:
    """Submit ``wheel``; the sm_90 runner posts ``result`` as its determinism stage."""
    build_id = submit_wheel(svc, wheel)
    lease = gpu.post("/api/jobs/claim", json={}).json()
    assert lease["kind"] == "gpu" and lease["build_id"] == build_id, lease
    token = lease["lease_token"]
    resp = gpu.post(
        f"/api/jobs/{lease['job_id']}/stages", json={"lease_token": token, "result": result}
    )
    assert resp.status_code == 201, resp.text
    gpu.post(f"/api/jobs/{lease['job_id']}/finish", json={"lease_token": token})
    report: dict = httpx.get(f"{svc.url}/api/builds/{build_id}").json()
    return report


@pytest.fixture
def gpu_service(make_service, tmp_path: Path) -> tuple[Service, httpx.Client, Path]:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90")
    return svc, register(svc, "h200", arch="sm_90"), make_wheel(tmp_path / "w", "1.32.0", "")


def kinds(report: dict) -> list[str]:
    return [f["kind"] for f in report["findings"]]


def test_same_bytes_are_bits_unchanged_and_different_bytes_a_finding(gpu_service) -> None:  # type: ignore[no-untyped-def]
    svc, gpu, wheel = gpu_service
    first = gpu_build(svc, gpu, wheel, measured())
    (row,) = first["history"]
    assert row["bits"] == "first" and row["previous_build_id"] is None
    second = gpu_build(svc, gpu, wheel, measured())  # the same wheel again
    (row,) = second["history"]
    assert row["bits"] == "unchanged" and row["previous_build_id"] == first["id"]
    assert row["changed"] == {} and "deterministic_bits_changed" not in kinds(second)
    third = gpu_build(svc, gpu, wheel, measured(nudge=1e-3))
    (row,) = third["history"]
    assert row["bits"] == "changed" and row["previous_build_id"] == second["id"]
    # max |d| over the stored sample of the previous build's first run: real, not zero
    assert row["changed"]["out"] is not None and 0 < row["changed"]["out"] < 0.1
    (finding,) = [f for f in third["findings"] if f["kind"] == "deterministic_bits_changed"]
    assert finding["severity"] == "warning" and finding["subject"] == "sdpa_bwd"
    assert f"build {second['id']}" in finding["message"] and "out (max |d|" in finding["message"]
    assert third["verdict"] != "fail"  # a warning: shown, does not fail the build
    # shown on the build page and in the trends page's column
    page = httpx.get(f"{svc.url}/builds/{third['id']}").text
    assert 'id="since-previous"' in page and "changed" in page
    trends = httpx.get(f"{svc.url}/trends").text
    assert "sm_90 sdpa_bwd: bits_unchanged" in trends and "sm_90 sdpa_bwd: changed" in trends


def test_another_key_is_not_compared(gpu_service) -> None:  # type: ignore[no-untyped-def]
    svc, gpu, wheel = gpu_service
    gpu_build(svc, gpu, wheel, measured())
    other = measured(nudge=1e-3)
    other["checks"][0]["metrics"]["comparable"]["cudnn_backend"] = (
        "91200"  # a different cuDNN backend
    )
    (row,) = gpu_build(svc, gpu, wheel, other)["history"]
    assert row["bits"] == "first"


def test_cost_ratio_is_stored_and_a_regression_past_the_factor_is_a_finding(gpu_service) -> None:  # type: ignore[no-untyped-def]
    svc, gpu, wheel = gpu_service
    base = measured()
    stored = gpu_build(svc, gpu, wheel, base)["history"][0]
    assert stored["cost_ratio"] == pytest.approx(base["checks"][0]["metrics"]["cost"]["ratio"])
    assert stored["timer"] == "perf_counter"
    gpu_build(svc, gpu, wheel, measured(ratio=2.0))
    below = gpu_build(svc, gpu, wheel, measured(ratio=2.0 * 1.24))  # 1.24x growth: no finding
    assert below["history"][0]["previous_cost_ratio"] == pytest.approx(2.0)
    assert not below["history"][0]["cost_regressed"]
    assert "determinism_cost_regressed" not in kinds(below)
    past = gpu_build(svc, gpu, wheel, measured(ratio=2.48 * 1.26))  # 1.26x growth: a finding
    assert past["history"][0]["cost_regressed"]
    (finding,) = [f for f in past["findings"] if f["kind"] == "determinism_cost_regressed"]
    assert finding["severity"] == "warning" and "3.12x" in finding["message"]
    assert "2.48x" in finding["message"] and "1.25x" in finding["message"]
    trends = httpx.get(f"{svc.url}/trends").text
    assert "sdpa_bwd: cost of determinism" in trends and "3.12x (perf_counter)" in trends


def test_the_cost_factor_is_configurable(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90", FE_CI_COST_FACTOR="2")
    gpu, wheel = register(svc, "h200", arch="sm_90"), make_wheel(tmp_path / "w", "1.32.0", "")
    gpu_build(svc, gpu, wheel, measured(ratio=1.0))
    assert not gpu_build(svc, gpu, wheel, measured(ratio=1.9))["history"][0]["cost_regressed"]
    assert gpu_build(svc, gpu, wheel, measured(ratio=3.9))["history"][0]["cost_regressed"]


def test_a_varying_or_negative_control_arm_is_not_compared() -> None:
    (check,) = measured()["checks"]
    assert history.comparable(check["metrics"])
    varied = {**check["metrics"], "outputs": {"out": {"distinct": 2, "finite": True}}}
    assert not history.comparable(varied)
    assert not history.comparable({**check["metrics"], "negative_control": True})


def test_validate_previous_compares_two_reports_by_the_same_rule() -> None:
    def report(stage: dict[str, Any]) -> BuildReport:
        job = JobReport(
            kind=JobKind.gpu,
            family="sm_90",
            status=JobState.finished,
            stages=[StageResult.model_validate(stage)],
        )
        return BuildReport(
            source="wheel", status=BuildStatus.finished, verdict=Verdict.pass_, jobs=[job]
        )

    earlier = report(measured(ratio=1.0))
    rows, findings = history.compare_reports(report(measured(ratio=1.2)), earlier)
    assert [(r.subject, r.bits, r.cost_regressed) for r in rows] == [
        ("sdpa_bwd", "unchanged", False)
    ]
    assert findings == []
    rows, findings = history.compare_reports(report(measured(nudge=1e-3, ratio=1.3)), earlier)
    assert rows[0].bits == "changed" and rows[0].changed["out"]
    assert {f.kind for f in findings} == {
        "deterministic_bits_changed",
        "determinism_cost_regressed",
    }


def test_a_malformed_or_oversized_measurement_is_stored_but_never_compared(gpu_service) -> None:  # type: ignore[no-untyped-def]
    """What a runner posts comes from outside: bad shapes cost nothing and break nothing."""
    svc, gpu, wheel = gpu_service
    gpu_build(svc, gpu, wheel, measured())
    for bad in (
        {"values": ["1.5"] * 4, "stride": 1, "numel": 4},  # numbers as text
        {"values": [0.0] * 100_000, "stride": 1, "numel": 100_000},  # far past the sample size
    ):
        stage = measured(nudge=1e-3)
        stage["checks"][0]["metrics"]["sample"]["out"] = bad
        report = gpu_build(svc, gpu, wheel, stage)
        assert report["history"] == [] and "deterministic_bits_changed" not in kinds(report)
        (det,) = [s for j in report["jobs"] for s in j["stages"] if s["name"] == "determinism"]
        assert det["checks"][0]["status"] == "pass"  # the check itself is kept as posted
    # a good measurement after them still finds the last comparable build
    (row,) = gpu_build(svc, gpu, wheel, measured())["history"]
    assert row["bits"] == "unchanged"
