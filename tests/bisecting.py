"""Waiting on builds and bisections of the frontend-shaped repository (testkit/frontend_repo.py),
shared by the bisection tests: a builder runner's environment, one job at a time, a red build
after a green one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from testkit import loopback, processes
from testkit.service import ROOT, Service
from testkit.waiting import eventually
from tests.helpers import push, send, wait_for


def repo_dir(tmp_path: Path) -> Path:
    return tmp_path / "github.com" / "NVIDIA" / "cudnn-frontend"


def wait_build(svc: Service, build_id: int, timeout: float = 300) -> dict[str, Any]:
    return wait_for(svc, build_id, ended, timeout=timeout)


def ended(report: dict[str, Any]) -> bool:
    return report["status"] in ("finished", "cancelled")


def bisection_of(svc: Service, build_id: int, timeout: float = 60) -> dict[str, Any]:
    """The bisection the red build ``build_id`` opened, once there is one."""
    items = eventually(
        lambda: loopback.get(f"{svc.url}/api/bisections", params={"build": build_id}).json()[
            "items"
        ],
        timeout=timeout,
        interval=0.5,
        message=f"a bisection of build {build_id}",
    )
    return dict(items[0])


def wait_bisection(svc: Service, bisection_id: int, timeout: float = 600) -> dict[str, Any]:
    return eventually(
        lambda: loopback.get(f"{svc.url}/api/bisections/{bisection_id}").json(),
        until=lambda b: b["state"] not in ("opening", "running"),
        timeout=timeout,
        interval=0.5,
        message=f"bisection {bisection_id} to end",
    )


def runner_env(svc: Service) -> dict[str, str]:
    return svc.runner_env(FE_CI_RUNNER_NAME="builder-1", FE_CI_RUNNER_LABELS="builder=1")


def run_once(svc: Service, times: int) -> None:
    """A builder runner that takes one job and exits, ``times`` over: the queue moves in steps."""
    for _ in range(times):
        proc = processes.run(
            [sys.executable, "-m", "cli.main", "runner", "--once"],
            env=runner_env(svc),
            cwd=ROOT,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]


def red_after_green(svc: Service, shas: list[str], *, serve: bool = True) -> tuple[int, int]:
    """Push commit 1 (built green), then one push of the rest: the red build."""
    good = send(svc, push(after=shas[0]), delivery="d-good").json()["build_id"]
    if not serve:
        run_once(svc, 2)  # its build job and its probe
    first = wait_build(svc, good)
    assert first["verdict"] != "fail", first["verdict_reason"]
    assert first["capabilities"]["grouped_gemm_dsrelu"]["present"]
    bad = send(svc, push(after=shas[-1]), delivery="d-bad").json()["build_id"]
    if not serve:
        run_once(svc, 2)
    report = wait_build(svc, bad)
    assert report["verdict"] == "fail", report["verdict_reason"]
    assert "feature_regression" in {f["kind"] for f in report["findings"]}
    return good, bad
