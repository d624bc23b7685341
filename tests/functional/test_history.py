"""Deterministic bits and the cost of determinism across builds, through the real service.

No GPU here: the deterministic arm is a real CPU measurement (``tests/fakesubjects.py``) under the
name of a GPU subject, posted through the runner protocol as an sm_90 runner would post it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

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
from testkit import loopback
from testkit.service import Service
from testkit.wheels import make_wheel
from tests.fakesubjects import posted_stage
from tests.helpers import register, submit_wheel

CONFIG = "b4_h16_s4096_d128_causal"  # a config sdpa_bwd has: the service checks the name


def measured(nudge: float = 0.0, ratio: float | None = None) -> dict[str, Any]:
    """The determinism stage of one real CPU measurement under the name ``sdpa_bwd``; ``nudge``
    changes the inputs' first value (so the output bytes change), ``ratio`` sets the cost."""
    stage = posted_stage("sdpa_bwd", (CONFIG,), {CONFIG}, nudge=nudge, ratio=ratio)
    assert stage["checks"][0]["status"] == "pass", stage["checks"][0]["detail"]
    return stage


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
    report: dict = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
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
    page = loopback.get(f"{svc.url}/builds/{third['id']}").text
    assert 'id="since-previous"' in page and "changed" in page
    trends = loopback.get(f"{svc.url}/trends").text
    assert "sm_90 sdpa_bwd: bits_unchanged" in trends and "sm_90 sdpa_bwd: changed" in trends


def test_another_key_is_not_compared(gpu_service) -> None:  # type: ignore[no-untyped-def]
    svc, gpu, wheel = gpu_service
    gpu_build(svc, gpu, wheel, measured())
    other = measured(nudge=1e-3)
    other["checks"][0]["metrics"]["comparison"]["comparable"]["cudnn_backend"] = (
        "91200"  # a different cuDNN backend
    )
    (row,) = gpu_build(svc, gpu, wheel, other)["history"]
    assert row["bits"] == "first"


def test_the_cost_gate_learns_its_band_from_the_genuine_builds_of_the_series(gpu_service) -> None:  # type: ignore[no-untyped-def]
    svc, gpu, wheel = gpu_service
    stored = gpu_build(svc, gpu, wheel, measured(ratio=0.80))["history"][0]
    assert stored["cost_ratio"] == pytest.approx(0.80) and stored["cost_builds"] == 0
    assert stored["timer"] == "perf_counter"
    # genuine builds as the H200 measured flex_attention_bwd, arms one after the other: the
    # floor alone over the previous build (1.25x) would call 0.98 after 0.72 a regression
    for ratio in (0.77, 0.86, 0.82, 0.72, 0.98):
        row = gpu_build(svc, gpu, wheel, measured(ratio=ratio))["history"][0]
        assert not row["cost_regressed"], row
    slow = gpu_build(svc, gpu, wheel, measured(ratio=1.5 * 0.72))  # 1.5x the fastest genuine one
    (row,) = slow["history"]
    assert row["cost_regressed"] and row["cost_builds"] == 6
    assert row["cost_median"] == pytest.approx(0.81) and row["cost_limit"] < 1.08
    (finding,) = [f for f in slow["findings"] if f["kind"] == "determinism_cost_regressed"]
    assert finding["severity"] == "warning" and slow["verdict"] != "fail"
    for text in ("1.08x", "median 0.81x", f"limit {row['cost_limit']:.2f}x", "took 0.98x"):
        assert text in finding["message"], finding["message"]
    # the flagged build does not widen the band: the next genuine one is judged without it
    after = gpu_build(svc, gpu, wheel, measured(ratio=0.84))["history"][0]
    assert not after["cost_regressed"] and after["previous_cost_ratio"] == pytest.approx(1.08)
    assert after["cost_limit"] == pytest.approx(row["cost_limit"])
    trends = loopback.get(f"{svc.url}/trends").text
    assert "sdpa_bwd: cost of determinism" in trends and "1.08x (perf_counter)" in trends


def test_the_cost_factor_is_configurable(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90", FE_CI_COST_FACTOR="2")
    gpu, wheel = register(svc, "h200", arch="sm_90"), make_wheel(tmp_path / "w", "1.32.0", "")
    gpu_build(svc, gpu, wheel, measured(ratio=1.0))
    assert not gpu_build(svc, gpu, wheel, measured(ratio=1.9))["history"][0]["cost_regressed"]
    assert gpu_build(svc, gpu, wheel, measured(ratio=3.9))["history"][0]["cost_regressed"]


def test_a_varying_or_negative_control_arm_is_not_compared() -> None:
    (check,) = measured()["checks"]
    compared = history.measurement(check["metrics"])
    assert history.comparable(compared)
    varied = {**compared, "outputs": {"out": {"distinct": 2, "finite": True}}}
    assert not history.comparable(varied)
    assert not history.comparable({**compared, "negative_control": True})


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
    """What a runner posts comes from outside: bad shapes cost nothing and break nothing. One
    whose metrics are past the door's bounds is refused there (and stores nothing); one within
    them that is not a measurement is stored but never compared."""
    svc, gpu, wheel = gpu_service
    gpu_build(svc, gpu, wheel, measured())
    stage = measured(nudge=1e-3)
    huge = {"values": [0.0] * 100_000, "stride": 1, "numel": 100_000}  # far past the sample size
    stage["checks"][0]["metrics"]["comparison"]["sample"]["out"] = huge
    with pytest.raises(AssertionError, match="more than 100000 values"):
        gpu_build(svc, gpu, wheel, stage)
    for bad in (
        {"values": ["1.5"] * 4, "stride": 1, "numel": 4},  # numbers as text
        {"values": [0.0] * 1000, "stride": 1, "numel": 1000},  # past the sample size
    ):
        stage = measured(nudge=1e-3)
        stage["checks"][0]["metrics"]["comparison"]["sample"]["out"] = bad
        report = gpu_build(svc, gpu, wheel, stage)
        assert report["history"] == [] and "deterministic_bits_changed" not in kinds(report)
        (det,) = [s for j in report["jobs"] for s in j["stages"] if s["name"] == "determinism"]
        assert det["checks"][0]["status"] == "pass"  # the check itself is kept as posted
    # a good measurement after them still finds the last comparable build
    (row,) = gpu_build(svc, gpu, wheel, measured())["history"]
    assert row["bits"] == "unchanged"


def test_validate_previous_takes_the_comparison_points_of_its_own_cell() -> None:
    """A previous report of a matrix measured each cell at its own point: a run on one cell
    compares at that cell's, never at another backend's of the same family."""

    def job(cell: str, config: str) -> JobReport:
        stage = measured()
        stage["checks"][0]["metrics"]["comparison"]["config_name"] = config
        return JobReport(
            kind=JobKind.gpu,
            family="sm_90",
            cell=cell,
            status=JobState.finished,
            stages=[StageResult.model_validate(stage)],
        )

    previous = BuildReport(
        source="wheel",
        status=BuildStatus.finished,
        verdict=Verdict.pass_,
        jobs=[job("sm_90", "host_config"), job("sm_90-cudnn9.28.1", "backend_config")],
    )
    points = history.comparison_points(previous, "sm_90-cudnn9.28.1")
    assert [(p.cell, p.family, p.config) for p in points] == [
        ("sm_90-cudnn9.28.1", "sm_90", "backend_config")
    ]
    assert [p.config for p in history.comparison_points(previous, "sm_90")] == ["host_config"]
    assert len(history.comparison_points(previous)) == 2
