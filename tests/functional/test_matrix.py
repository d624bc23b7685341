"""The matrix through a real service on 127.0.0.1: ``FE_CI_MATRIX`` expands a build into a GPU job
per family x cuDNN backend, each named by its cell; runners take jobs by their labels, and a runner
of the previous protocol (it sends only its family) still gets its family's host-backend jobs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core import gate
from core.verdict import judge_job
from core.wire import BuildReport, Verdict
from service.outbound import statuses
from testkit.backends import FRONTEND_INIT, broken_backend_wheel
from testkit.service import ROOT, Service, service_env
from testkit.wheels import make_wheel
from tests.helpers import register, report, submit_wheel, wait_for

MATRIX = "cudnn=host,9.28.1"
CELL = "sm_90-cudnn9.28.1"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small frontend wheel: no runner here installs it, the claims are what is tested."""
    return make_wheel(tmp_path_factory.mktemp("wheel"), "9.4.0", "VALUE = 1\n")


@pytest.fixture
def matrix_service(make_service) -> Service:  # type: ignore[no-untyped-def]
    return make_service(FE_CI_MATRIX=MATRIX, FE_CI_GPU_ARCHS="sm_90")


def _claim(runner) -> dict | None:  # type: ignore[no-untyped-def]
    resp = runner.post("/api/jobs/claim", json={})
    assert resp.status_code in (200, 204), resp.text
    return resp.json() if resp.status_code == 200 and resp.content else None


def test_a_build_expands_into_a_gpu_job_per_cell(matrix_service: Service, wheel: Path) -> None:
    build_id = submit_wheel(matrix_service, wheel)
    jobs = report(matrix_service, build_id)["jobs"]
    assert [(j["kind"], j["family"], j["cell"]) for j in jobs] == [
        ("cpu", None, None),
        ("gpu", "sm_90", "sm_90"),  # the host's backend keeps the family's name
        ("gpu", "sm_90", CELL),
    ]
    parsed = BuildReport.model_validate(report(matrix_service, build_id))
    contexts = [statuses.context(j) for j in parsed.jobs]
    assert contexts == ["fe-ci/probe", "fe-ci/sm_90", f"fe-ci/{CELL}"]
    with matrix_service.db() as db:
        rows = db.execute("SELECT kind, requires FROM jobs ORDER BY id").fetchall()
    assert rows == [("cpu", ""), ("gpu", "arch=sm_90"), ("gpu", "arch=sm_90,cudnn=9.28.1")]
    # the build page shows a job per cell, each under its cell's name
    with matrix_service.http(None) as http:
        page = http.get(f"/builds/{build_id}").text
    for job in jobs[1:]:
        assert f'<h3 id="job-{job["id"]}">gpu job {job["id"]} ({job["cell"]})' in page


def test_a_runner_of_the_previous_protocol_gets_its_familys_host_jobs_only(
    matrix_service: Service, wheel: Path
) -> None:
    """The request shape of the previous runner: its family (and GPU) as labels, nothing of a
    backend. It takes the CPU job and its family's host-backend job, never the 9.28.1 cell."""
    build_id = submit_wheel(matrix_service, wheel)
    old = register(matrix_service, "old-runner", arch="sm_90", gpu="NVIDIA H200")
    taken = [_claim(old) for _ in range(3)]
    got = [(t["kind"], t["family"], t.get("cudnn")) for t in taken if t is not None]
    assert sorted(got, key=str) == sorted([("gpu", "sm_90", None), ("cpu", None, None)], key=str)
    assert taken[2] is None
    cells_left = [
        j["cell"] for j in report(matrix_service, build_id)["jobs"] if j["status"] == "queued"
    ]
    assert cells_left == [CELL]
    # another family's runner and a runner narrowed to another backend take nothing of it
    assert _claim(register(matrix_service, "sm100", arch="sm_100", cudnn="*")) is None
    assert _claim(register(matrix_service, "narrow", arch="sm_90", cudnn="9.26.0")) is None
    # a runner that offers the backend takes it, and the lease says which backend to load
    lease = _claim(register(matrix_service, "new", arch="sm_90", cudnn="9.26.0|9.28.1"))
    assert lease is not None and lease["cell"] == CELL and lease["cudnn"] == "9.28.1"
    with matrix_service.http(None) as http:  # the grid says which cell runs where
        assert f"gpu {CELL} job, attempt 1 on new" in http.get("/").text


def test_the_gate_names_a_cell(make_service, wheel: Path) -> None:  # type: ignore[no-untyped-def]
    """``FE_CI_REQUIRE`` may name a cell: the gate judges that cell's job; a cell of an unknown
    backend is refused like any unknown name."""
    assert gate.parse_require(f"probe,{CELL}") == ["probe", CELL]
    with pytest.raises(ValueError, match="unknown required check"):
        gate.parse_require("sm_90-cudnn9.99.9")
    svc = make_service(FE_CI_MATRIX=MATRIX, FE_CI_GPU_ARCHS="sm_90", FE_CI_REQUIRE=CELL)
    build_id = submit_wheel(svc, wheel)
    new = register(svc, "new", arch="sm_90", cudnn="9.28.1")
    lease = _claim(new)
    assert lease is not None and lease["cell"] == "sm_90"  # any GPU job first, the host's
    lease = _claim(new)
    assert lease is not None and lease["cell"] == CELL
    token = lease["lease_token"]
    done = new.post(
        f"/api/jobs/{lease['job_id']}/finish", json={"lease_token": token, "error": "boom"}
    )
    assert done.status_code == 200, done.text
    got = report(svc, build_id)["gate"]
    assert got["require"] == [CELL]
    assert got["conclusion"] == "failure" and CELL in got["reason"], got


def test_an_unknown_backend_is_refused_at_start_with_the_known_ones(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = service_env(data, FE_CI_MATRIX="cudnn=host,9.99.1")
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "serve", "--port", "1"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    said = out.stdout + out.stderr
    assert "unknown cuDNN backend(s) 9.99.1" in said
    assert "9.28.1" in said and "9.12.0" in said  # the known ones, listed
    assert not (data / "fe-ci.sqlite3").exists()


def test_a_broken_backend_errs_its_cell_and_the_other_cells_finish(
    make_service,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """A real runner (labelled sm_90 on this CPU host) takes every job of a build on the matrix
    ``host,9.28.1``; its wheelhouse holds a broken ``nvidia_cudnn_cu13-9.28.1...`` wheel, so the
    9.28.1 cell ends ``error`` naming why, and the CPU job and the host cell finish as usual."""
    svc = make_service(FE_CI_MATRIX=MATRIX, FE_CI_GPU_ARCHS="sm_90")
    wheelhouse = tmp_path / "wheelhouse"
    broken_backend_wheel(wheelhouse)
    build_id = submit_wheel(svc, make_wheel(tmp_path, "1.32.0", FRONTEND_INIT))
    runner = svc.start_runner(
        tmp_path / "runner.log",
        FE_CI_RUNNER_NAME="matrix-runner",
        FE_CI_RUNNER_LABELS="arch=sm_90",
        FE_CI_WHEELHOUSE=str(wheelhouse),
    )
    try:
        done = wait_for(svc, build_id, lambda r: r["status"] == "finished", timeout=300)
    finally:
        runner.terminate()
        runner.wait(timeout=60)
    jobs = {j["cell"] or j["kind"]: j for j in done["jobs"]}
    assert set(jobs) == {"cpu", "sm_90", CELL}
    installs = {
        name: next(s for s in job["stages"] if s["name"] == "install") for name, job in jobs.items()
    }
    assert installs["cpu"]["status"] == "pass" and installs["sm_90"]["status"] == "pass"
    assert installs[CELL]["status"] == "error"
    assert installs[CELL]["reason"].startswith(
        "the cuDNN backend 9.28.1 (nvidia-cudnn-cu13==9.28.1.*) did not install"
    )
    assert all(j["status"] == "finished" for j in jobs.values())
    assert jobs["sm_90"]["environment"]["cudnn_requested"] is None
    assert jobs[CELL]["environment"]["cudnn_requested"] == "9.28.1"
    parsed = BuildReport.model_validate(done)
    by_cell = {j.cell: j for j in parsed.jobs if j.cell}
    assert judge_job(parsed, by_cell[CELL]).verdict == Verdict.error  # its GitHub context's
    assert judge_job(parsed, by_cell["sm_90"]).verdict != Verdict.error
    assert [c.cell for c in parsed.causes if c.status == "error"] == [CELL]


def test_trends_draw_a_series_per_cell(matrix_service: Service, wheel: Path) -> None:
    """The control arm of both cells of sm_90, posted through the runner protocol, is drawn as
    two series on /trends, one per cell, and the build page's drift rows name their cell."""
    build_id = submit_wheel(matrix_service, wheel)
    runner = register(matrix_service, "both", arch="sm_90", cudnn="*")
    leases = [_claim(runner) for _ in range(3)]
    gpu = [lease for lease in leases if lease is not None and lease["kind"] == "gpu"]
    assert sorted(lease["cell"] for lease in gpu) == ["sm_90", CELL]
    for lease, differing in zip(gpu, (3, 5), strict=True):
        row = {"subject": "sdpa_bwd", "output": "dq", "arm": "control", "runs": 8}
        row |= {"differing": differing, "distinct": 4, "max_abs_diff": 1e-3, "finite": True}
        body = {
            "lease_token": lease["lease_token"],
            "result": {"name": "determinism", "status": "pass", "drift": [row]},
        }
        posted = runner.post(f"/api/jobs/{lease['job_id']}/stages", json=body)
        assert posted.status_code == 201, posted.text
    drift = report(matrix_service, build_id)["drift"]
    assert sorted(d["cell"] for d in drift) == ["sm_90", CELL]
    with matrix_service.http(None) as http:
        page = http.get("/trends").text
    assert f"build {build_id} sm_90: 3 of 8 runs differ" in page
    assert f"build {build_id} {CELL}: 5 of 8 runs differ" in page


def test_a_cell_no_runner_offers_ends_skipped_saying_which_backend(
    make_service,
    wheel: Path,  # type: ignore[no-untyped-def]
) -> None:
    svc = make_service(FE_CI_MATRIX=MATRIX, FE_CI_GPU_ARCHS="sm_90", FE_CI_GPU_WAIT_HOURS="0")
    build_id = submit_wheel(svc, wheel)
    old = register(svc, "old-runner", arch="sm_90")
    _claim(old)  # a claim sweeps first: both GPU jobs are past their wait of zero hours
    jobs = {j["cell"]: j for j in report(svc, build_id)["jobs"] if j["cell"]}
    assert jobs["sm_90"]["reason"] == "skipped: no sm_90 runner"  # as before the matrix
    assert jobs[CELL]["reason"] == "skipped: no sm_90 runner offering cudnn=9.28.1"
    assert jobs[CELL]["outcome"] == "skipped"


def test_a_cell_no_alive_runner_offers_says_which_label_is_missing(
    matrix_service: Service, wheel: Path
) -> None:
    """The report's and the grid's waiting words name the backend label no alive runner of the
    family offers; a runner offering it (in a list, or ``*``) ends that wait."""
    build_id = submit_wheel(matrix_service, wheel)

    def waiting() -> dict[str, str | None]:
        jobs = report(matrix_service, build_id)["jobs"]
        return {j["cell"] or j["kind"]: j["waiting"] for j in jobs if j["status"] == "queued"}

    assert waiting()[CELL] == "no runner with arch=sm_90 is alive"
    register(matrix_service, "old-runner", arch="sm_90")  # no backend label: the host's only
    register(matrix_service, "narrow", arch="sm_90", cudnn="9.26.0|host")
    register(matrix_service, "other", arch="sm_100", cudnn="9.28.1")  # another family's
    missing = "no alive sm_90 runner offers cudnn=9.28.1"
    assert waiting() == {"cpu": None, "sm_90": None, CELL: missing}
    with matrix_service.http(None) as http:
        assert f"{missing}; the job is queued" in http.get("/").text
    register(matrix_service, "new", arch="sm_90", cudnn="9.26.0|9.28.1")
    assert waiting()[CELL] is None


def test_a_runner_offering_every_backend_ends_a_cells_wait(
    matrix_service: Service, wheel: Path
) -> None:
    build_id = submit_wheel(matrix_service, wheel)
    register(matrix_service, "every", arch="sm_90", cudnn="*")
    assert {j["waiting"] for j in report(matrix_service, build_id)["jobs"]} == {None}
