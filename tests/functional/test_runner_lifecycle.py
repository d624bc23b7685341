"""A runner's start and stop as the service sees them: real ``fe-ci runner`` processes against a
real service on 127.0.0.1."""

from __future__ import annotations

import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

from runner.isolation import jail, uids
from testkit import loopback, processes
from testkit.service import ROOT, Service
from testkit.waiting import eventually
from tests.helpers import processes_in, submit_wheel, wait_for


def runner_state(svc: Service, name: str) -> str:
    """The state the /runners page shows for ``name``."""
    html = loopback.get(f"{svc.url}/runners").text
    row = html.split(f'data-runner="{name}"', 1)[1].split("</tr>", 1)[0]
    for state in ("alive", "offline", "gone", "revoked"):
        if f">{state}<" in row:
            return state
    raise AssertionError(row)


def runner_env(svc: Service, name: str, **extra: str) -> dict[str, str]:
    return svc.runner_env(
        FE_CI_RUNNER_NAME=name,
        FE_CI_RUNNER_LABELS="arch=sm_90",
        FE_CI_CLAIM_WAIT_S="1",
        FE_CI_POLL_INTERVAL_S="0.2",
        FE_CI_WARM_WORKERS="false",
        **extra,
    )


def submit_commit(svc: Service) -> dict:
    with svc.http() as http:
        resp = http.post("/validate", json={"commit": "ab" * 20})
    assert resp.status_code == 202, resp.text
    return dict(loopback.get(f"{svc.url}/api/builds/{resp.json()['build_id']}").json())


def test_a_runner_that_exits_after_once_shows_offline_at_once(make_service) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_GPU_ARCHS="auto")
    proc = processes.run(
        [sys.executable, "-m", "cli.main", "runner", "--once"],
        env=runner_env(svc, "once-1"),
        cwd=ROOT,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "event=offline" in proc.stderr
    assert runner_state(svc, "once-1") == "offline"
    # and ``auto`` no longer counts its family: a build submitted now gets no sm_90 job
    families = {j["family"] for j in submit_commit(svc)["jobs"]}
    assert "sm_90" not in families, families


def test_a_runner_stopped_by_sigterm_shows_offline_and_a_restart_is_alive(make_service) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_GPU_ARCHS="auto")
    proc = processes.popen(
        [sys.executable, "-m", "cli.main", "runner"],
        env=runner_env(svc, "term-1"),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(lambda: svc.count("runners"), timeout=60, message="the runner registered")
        assert runner_state(svc, "term-1") == "alive"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert runner_state(svc, "term-1") == "offline"
    # registering again (a restart) makes it alive again
    resp = loopback.post(
        f"{svc.url}/api/runners/register",
        json={"name": "term-1", "labels": {"arch": "sm_90"}},
        headers={"Authorization": f"Bearer {svc.env['FE_CI_RUNNER_TOKEN']}"},
    )
    assert resp.status_code == 200, resp.text
    assert runner_state(svc, "term-1") == "alive"


def _owners(where: list[Path]) -> set[int]:
    """The uids that own these paths (a job's box, a warm parent's socket directory), where
    they are another uid than the runner's."""
    found = set()
    for path in where:
        try:
            found.add(path.stat().st_uid)
        except FileNotFoundError:  # gone meanwhile
            continue
    return found - {0}


def test_a_runner_stopped_mid_job_ends_it_and_exits_cleanly_leaving_no_process(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """SIGTERM while a job runs (its probe, forked from a warm parent): the runner finishes the
    job, reports it, goes offline and exits 0, with nothing on its stderr but its log lines (no
    traceback from a cleanup run as the interpreter shuts down), and no process of the job's or
    the warm parent's uid, nor any in its cache directory, is left."""
    svc: Service = make_service()
    build_id = submit_wheel(svc)
    cache = Path(svc.runner_env()["FE_CI_CACHE_DIR"])
    log = tmp_path / "runner.log"
    proc = svc.start_runner(log, FE_CI_RUNNER_NAME="busy-1")
    try:
        eventually(
            log.read_text,
            until=lambda text: "stage=probe" in text,
            timeout=600,
            interval=0.2,
            message="the probe stage started",
        )
        held = _owners([*cache.glob("jobs/job-*/box"), *cache.glob("zygotes/*/sock")])
        assert held or not jail.mechanism().uid_drop  # as root, the job runs as a uid of its own
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    after_stop = text.split("event=stop_requested", 1)[1]
    assert "event=job_finished" in after_stop and "event=offline runner=busy-1" in after_stop
    strays = [line for line in text.splitlines() if line and not line.startswith("ts=")]
    assert strays == [], "\n".join(strays[-40:])
    assert wait_for(svc, build_id, lambda r: r["status"] == "finished")["verdict"] != "error"
    assert processes_in(cache) == []
    assert {uid: uids.running_as(uid) for uid in held} == {uid: [] for uid in held}


def test_offline_needs_a_runner_token(module_service: Service) -> None:
    resp = loopback.post(f"{module_service.url}/api/runners/offline")
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "unauthorized"


def _python_without_torch(tmp_path: Path) -> Path:
    """A directory holding every package of this environment except torch (links, not copies)."""
    site = Path(sysconfig.get_paths()["purelib"])
    out = tmp_path / "site-without-torch"
    out.mkdir()
    for entry in site.iterdir():
        if entry.name == "torch" or entry.name.lower().startswith("torch-"):
            continue
        (out / entry.name).symlink_to(entry)
    return out


def test_a_runner_without_torch_refuses_to_start(module_service: Service, tmp_path: Path) -> None:
    """The interpreter runs without its site packages (``-S``) and sees only the links: the
    environment a runner installed without torch would have."""
    before = module_service.count("runners")
    site = _python_without_torch(tmp_path)
    env = runner_env(module_service, "no-torch", PYTHONPATH=f"{ROOT}:{site}")
    check = subprocess.run(
        [sys.executable, "-S", "-c", "import httpx, typer, pydantic; import torch"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "No module named 'torch'" in check.stderr, check.stderr
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "cli.main", "runner"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-3000:])
    assert "has no torch" in proc.stderr and "scripts/install" in proc.stderr, proc.stderr
    assert module_service.count("runners") == before  # it never registered
