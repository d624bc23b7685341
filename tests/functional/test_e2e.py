"""Through the service: POST /validate a real wheel, ``fe-ci runner --once``, read the report."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testkit import loopback, processes
from testkit.service import ROOT, Service
from tests.helpers import submit_wheel

pytestmark = pytest.mark.slow  # the runner installs the registry wheel into a fresh layer


def run_runner_once(
    svc: Service, name: str = "ci-1", timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [sys.executable, "-m", "cli.main", "runner", "--once"],
        env=svc.runner_env(FE_CI_RUNNER_NAME=name),
        cwd=ROOT,
        text=True,
        timeout=timeout,
    )


def test_wheel_probed_by_a_runner_and_shown(make_service) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_GPU_ARCHS="")
    build_id = submit_wheel(svc)
    queued = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
    assert queued["status"] == "queued" and queued["verdict"] == "pending"
    proc = run_runner_once(svc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "event=job_finished" in proc.stderr
    r = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
    assert r["status"] == "finished"
    assert r["verdict"] == "incomplete", r["verdict_reason"]
    (job,) = r["jobs"]
    assert job["runner"] == "ci-1" and job["kind"] == "cpu"
    stages = {s["name"]: s for s in job["stages"]}
    assert stages["install"]["status"] == "pass" and stages["probe"]["status"] == "pass"
    assert job["environment"]["torch"].startswith("2.13.0")
    caps = r["capabilities"]
    assert (
        caps["grouped_gemm_dsrelu"]["present"] and caps["grouped_gemm_dsrelu"]["default"] == "None"
    )
    assert caps["grouped_gemm_dglu"]["default"] == "False"
    assert caps["sdpa_bwd"]["method"] == "docstring"
    assert caps["flex_attention_bwd"]["present"], caps["flex_attention_bwd"]
    kinds = {f["kind"] for f in r["findings"]}
    assert "default_ignores_torch_flag" in kinds
    # the dashboard shows it
    page = loopback.get(f"{svc.url}/builds/{build_id}").text
    assert "1.32.0" in page and "docstring" in page and "incomplete" in page
    grid = loopback.get(f"{svc.url}/").text
    assert f'href="/builds/{build_id}"' in grid
    # each stage's log came with its result: pip's install, served as text
    logs = loopback.get(f"{svc.url}/api/builds/{build_id}/logs").text
    install = logs.split(f"==> cpu job {job['id']} · install (pass) <==\n", 1)[1].split("==> ")[0]
    assert "nvidia-cudnn-frontend" in install and "only the failure tail" not in install, logs
    # the runner's work directory is gone once it reported the job finished
    assert not list((svc.data_dir.parent / "runner-cache" / "jobs").glob("job-*"))
