"""``fe-ci submit --wait`` never hangs: the real CLI in a subprocess against a real service on
127.0.0.1 (or a port nothing listens on). No verdict, whatever the reason, exits 3, never the 1
of a red build; a build that waits for a runner nobody started says the command that starts one,
and the wait ends at ``--timeout`` while the build goes on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testkit import loopback, processes
from testkit.service import ROOT, Service, free_port
from testkit.wheels import make_wheel

EXIT_NO_VERDICT = 3


def fe_ci(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_") and k != "COLUMNS"}
    env.update({"PYTHONPATH": str(ROOT), "FE_CI_RUNNER_LABELS": ""}, **extra)
    return processes.run(
        [sys.executable, "-m", "cli.main", *args], cwd=cwd, env=env, text=True, timeout=120
    )


def test_a_build_with_no_runner_says_how_to_start_one_and_the_wait_ends(
    tmp_path: Path, make_service
) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service()
    wheel = make_wheel(tmp_path / "w", "1.32.0", "")
    proc = fe_ci(
        "submit", str(wheel), "--wait", "--timeout", "3", cwd=tmp_path, FE_CI_URL=svc.url,
        FE_CI_SUBMIT_TOKEN=svc.env["FE_CI_SUBMIT_TOKEN"],
    )  # fmt: skip
    assert proc.returncode == EXIT_NO_VERDICT, proc.stderr
    build_id = int(proc.stdout.split(":", 1)[0].removeprefix("build "))
    # while it waits: which job waits for what, and the exact command that starts a runner
    assert "cpu job: waiting: no runner is alive" in proc.stderr, proc.stderr
    assert f"start a runner: FE_CI_URL={svc.url} fe-ci runner" in proc.stderr, proc.stderr
    # then no verdict, said as such; the build is still there, pending, for a runner to take
    assert "error: no verdict after 3 s (--timeout)" in proc.stderr, proc.stderr
    assert f"the build goes on: {svc.url}/builds/{build_id}" in proc.stderr
    report = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
    assert report["verdict"] == "pending"


def test_no_service_no_verdict_exits_3(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "1.32.0", "")
    away = f"http://127.0.0.1:{free_port()}"
    proc = fe_ci("submit", str(wheel), "--wait", cwd=tmp_path, FE_CI_URL=away,
                 FE_CI_SUBMIT_TOKEN="x")  # fmt: skip
    assert proc.returncode == EXIT_NO_VERDICT, proc.stderr
    assert f"cannot reach the service at {away}" in proc.stderr
    pin = fe_ci("pin", cwd=tmp_path, FE_CI_URL=away)
    assert pin.returncode == EXIT_NO_VERDICT and "cannot reach the service" in pin.stderr


def test_a_refused_token_is_no_verdict_either(tmp_path: Path, module_service: Service) -> None:
    wheel = make_wheel(tmp_path / "w", "1.32.0", "")
    before = module_service.count("builds")
    proc = fe_ci("submit", str(wheel), "--wait", cwd=tmp_path, FE_CI_URL=module_service.url,
                 FE_CI_SUBMIT_TOKEN="wrong")  # fmt: skip
    assert proc.returncode == EXIT_NO_VERDICT, proc.stderr
    assert "check FE_CI_SUBMIT_TOKEN" in proc.stderr
    assert module_service.count("builds") == before


def test_a_timeout_that_is_not_a_number_of_seconds_is_bad_input(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "1.32.0", "")
    for value in ("0", "soon"):
        proc = fe_ci("submit", str(wheel), "--wait", "--timeout", value, cwd=tmp_path)
        assert proc.returncode == 4, (value, proc.stderr)
        assert "--timeout" in proc.stderr, proc.stderr
