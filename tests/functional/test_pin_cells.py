"""Comparison points per cell of the matrix, through a real service on 127.0.0.1: a family's host
cell (``sm_90``) and its cell on another cuDNN backend (``sm_90-cudnn9.28.1``) each get a pin and a
series of their own, a re-pin of one leaves the other alone, and ``fe-ci pin --cell`` lists and
re-pins one cell (``--family`` naming the host cell).

No GPU here: each determinism stage is a real CPU measurement (``tests/fakesubjects.py``) under a
GPU subject's name, measured where the lease says and posted as an sm_90 runner posts it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from runner.inside import plan
from testkit import loopback, processes
from testkit.service import ROOT, Service
from testkit.wheels import make_wheel
from tests.fakesubjects import SDPA_CONFIGS, posted_stage
from tests.helpers import register, submit_wheel

ADMIN = "admin-token-for-tests"
CELL = "sm_90-cudnn9.28.1"
S2048, S4096, B8 = SDPA_CONFIGS[1:]


class Matrix:
    """One service whose matrix is the host's backend and 9.28.1, one sm_90 runner that installs
    any backend, one wheel: builds one after another, each a job per cell."""

    def __init__(self, svc: Service, wheel: Path) -> None:
        self.svc, self.wheel = svc, wheel
        self.gpu = register(svc, "h200", arch="sm_90", cudnn="*")

    def leases(self) -> dict[str, dict[str, Any]]:
        """The GPU leases of a new build, by cell (the CPU job is taken and left running)."""
        submit_wheel(self.svc, self.wheel)
        taken = [self.gpu.post("/api/jobs/claim", json={}) for _ in range(3)]
        leases = [r.json() for r in taken if r.status_code == 200]
        gpu = {lease["cell"]: lease for lease in leases if lease["kind"] == "gpu"}
        assert sorted(gpu) == ["sm_90", CELL], leases
        return gpu

    def post(self, lease: dict[str, Any], varies: set[str], start: str | None = None) -> None:
        at = plan.comparison_points({"comparison": lease["comparison"]}, "sm_90").get("sdpa_bwd")
        stage = posted_stage("sdpa_bwd", SDPA_CONFIGS, varies, start=start, compare_at=at)
        body = {"lease_token": lease["lease_token"], "result": stage}
        resp = self.gpu.post(f"/api/jobs/{lease['job_id']}/stages", json=body)
        assert resp.status_code == 201, resp.text

    def report(self, build_id: int) -> dict[str, Any]:
        found: dict[str, Any] = loopback.get(f"{self.svc.url}/api/builds/{build_id}").json()
        return found


def pins_of(svc: Service, **query: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = loopback.get(f"{svc.url}/api/pins", params=query).json()["items"]
    return items


def in_force(svc: Service) -> dict[str, tuple[str, int]]:
    """``{cell: (config, series)}`` of sdpa_bwd's pins in force."""
    return {
        p["cell"]: (p["config"], p["series"])
        for p in pins_of(svc, subject="sdpa_bwd")
        if p["in_force"]
    }


def repin(svc: Service, cell: str, body: dict[str, Any]) -> httpx.Response:
    return loopback.post(
        f"{svc.url}/api/pins/{cell}/sdpa_bwd",
        json=body,
        headers={"Authorization": f"Bearer {ADMIN}"},
    )


@pytest.fixture
def matrix(make_service, tmp_path: Path) -> Matrix:  # type: ignore[no-untyped-def]
    svc = make_service(
        FE_CI_MATRIX="cudnn=host,9.28.1", FE_CI_GPU_ARCHS="sm_90", FE_CI_ADMIN_TOKEN=ADMIN
    )
    return Matrix(svc, make_wheel(tmp_path / "w", "1.32.0", ""))


def test_two_cells_of_one_family_get_two_pins_and_a_re_pin_of_one_leaves_the_other(
    matrix: Matrix,
) -> None:
    svc = matrix.svc
    first = matrix.leases()
    assert first["sm_90"]["comparison"] == first[CELL]["comparison"] == []
    # each cell's first robust measurement pins it: the host's walk settles at S2048, the
    # backend's (whose control varies only from S4096 up) at S4096
    matrix.post(first["sm_90"], {S2048, S4096, B8})
    matrix.post(first[CELL], {S4096, B8})
    pinned = pins_of(svc, subject="sdpa_bwd")
    assert sorted((p["cell"], p["family"], p["config"], p["series"]) for p in pinned) == [
        ("sm_90", "sm_90", S2048, 1),
        (CELL, "sm_90", S4096, 1),
    ]
    assert [p["cell"] for p in pins_of(svc, cell=CELL)] == [CELL]
    assert len(pins_of(svc, family="sm_90")) == 2  # a family's filter: every cell of it
    host = next(p for p in pinned if p["cell"] == "sm_90")

    # a re-pin of the backend cell: a new series there, the host cell's pin as it was
    resp = repin(svc, CELL, {"config": B8, "reason": "the larger shape varies every run"})
    assert resp.status_code == 201, resp.text
    change = resp.json()
    assert (change["pin"]["cell"], change["pin"]["series"], change["pin"]["config"]) == (
        CELL,
        2,
        B8,
    )
    assert (change["retired"]["cell"], change["retired"]["series"]) == (CELL, 1)
    now = {p["cell"]: p for p in pins_of(svc, subject="sdpa_bwd") if p["in_force"]}
    assert now["sm_90"] == host
    assert (now[CELL]["config"], now[CELL]["series"]) == (B8, 2)

    # the next build: each cell is leased with its own pin and measured in its own series
    second = matrix.leases()
    points = {cell: lease["comparison"] for cell, lease in second.items()}
    assert [(p["cell"], p["family"], p["config"], p["series"]) for p in points["sm_90"]] == [
        ("sm_90", "sm_90", S2048, 1)
    ]
    assert [(p["cell"], p["family"], p["config"], p["series"]) for p in points[CELL]] == [
        (CELL, "sm_90", B8, 2)
    ]
    matrix.post(second["sm_90"], {S2048, S4096, B8}, start=S2048)
    matrix.post(second[CELL], {B8}, start=B8)
    report = matrix.report(second["sm_90"]["build_id"])
    rows = {r["cell"]: r for r in report["history"]}
    assert (rows["sm_90"]["config"], rows["sm_90"]["series"], rows["sm_90"]["bits"]) == (
        S2048,
        1,
        "unchanged",
    )
    assert rows["sm_90"]["previous_build_id"] == first["sm_90"]["build_id"]
    assert (rows[CELL]["config"], rows[CELL]["series"], rows[CELL]["bits"]) == (B8, 2, "first")
    assert rows[CELL]["series_start"] and not rows["sm_90"]["series_start"]
    (marker,) = [f for f in report["findings"] if f["kind"] == "comparison_point_changed"]
    assert f"sdpa_bwd on {CELL}: series 2" in marker["message"]
    assert f"series 1 at {S4096}" in marker["message"]
    trends = loopback.get(f"{svc.url}/trends").text
    assert f"{CELL} sdpa_bwd: series 2 at {B8} from #{second[CELL]['build_id']}" in trends
    # measured off its own cell's pin (at the host cell's), the backend cell is refused
    third = matrix.leases()
    at = {"config": S2048, "series": 1}
    stage = posted_stage("sdpa_bwd", SDPA_CONFIGS, {S2048, B8}, start=S2048, compare_at=at)
    body = {"lease_token": third[CELL]["lease_token"], "result": stage}
    resp = matrix.gpu.post(f"/api/jobs/{third[CELL]['job_id']}/stages", json=body)
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "comparison_not_at_pin"
    assert f"sdpa_bwd on {CELL}" in resp.json()["error"]["message"]
    assert resp.json()["error"]["detail"]["cell"] == CELL


def test_a_re_pin_names_a_cell_there_is(matrix: Matrix) -> None:
    svc = matrix.svc
    unknown = repin(svc, "sm_90-cudnn1.2.3", {"config": B8})
    assert unknown.status_code == 400 and "9.28.1" in unknown.json()["error"]["message"]
    assert repin(svc, "sm_91", {"config": B8}).status_code == 400
    assert repin(svc, "sm_90-cudnn", {"config": B8}).status_code == 400
    assert repin(svc, "sm_90-cudnn9.28.1", {"config": B8, "extra": 1}).status_code == 422
    assert pins_of(svc) == []  # nothing changed by any of those


def test_fe_ci_pin_lists_and_re_pins_one_cell(matrix: Matrix) -> None:
    first = matrix.leases()
    matrix.post(first["sm_90"], {S2048, S4096, B8})
    matrix.post(first[CELL], {S4096, B8})
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_")}
    env.update(FE_CI_URL=matrix.svc.url, FE_CI_ADMIN_TOKEN=ADMIN, PYTHONPATH=str(ROOT))

    def fe_ci(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "cli.main", "pin", *args]
        return processes.run(cmd, env=env, text=True, timeout=120)

    listed = fe_ci()
    assert listed.returncode == 0, listed.stderr
    assert f"sm_90 sdpa_bwd series 1: {S2048} [measured, in force]" in listed.stdout
    assert f"{CELL} sdpa_bwd series 1: {S4096} [measured, in force]" in listed.stdout
    one = fe_ci("--cell", CELL)
    assert one.returncode == 0 and one.stdout.strip().splitlines() == [
        line for line in listed.stdout.strip().splitlines() if line.startswith(CELL + " ")
    ]
    done = fe_ci("sdpa_bwd", S2048, "--cell", CELL, "--reason", "as the host's")
    assert done.returncode == 0, done.stderr
    assert f"now:     {CELL} sdpa_bwd series 2: {S2048} [operator, in force]" in done.stdout
    assert f"retired: {CELL} sdpa_bwd series 1: {S4096}" in done.stdout
    host = fe_ci("sdpa_bwd", B8, "--family", "sm_90")  # --family: the family's host cell
    assert host.returncode == 0, host.stderr
    assert f"now:     sm_90 sdpa_bwd series 2: {B8} [operator, in force]" in host.stdout
    assert in_force(matrix.svc) == {
        "sm_90": (B8, 2),
        CELL: (S2048, 2),
    }
    both = fe_ci("sdpa_bwd", B8, "--family", "sm_90", "--cell", CELL)
    assert both.returncode == 4 and "not both" in both.stderr
    bad = fe_ci("sdpa_bwd", B8, "--cell", "sm_90-cudnn1.2.3")
    assert bad.returncode == 4 and "9.28.1" in bad.stderr
    assert fe_ci("--cell", "../x").returncode == 4
