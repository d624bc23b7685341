"""Faults a runner survives, with real processes on 127.0.0.1: hangs, crashes, cancellation."""

from __future__ import annotations

import signal
from pathlib import Path

from testkit import processes
from testkit.service import Service
from testkit.waiting import eventually
from testkit.wheels import BROKEN, HANG, SEGFAULT, make_wheel
from tests.helpers import processes_in, submit_wheel, wait_for


def start_runner(svc: Service, tmp_path: Path, *args: str, **env: str) -> processes.Process:
    return svc.start_runner(tmp_path / "runner.log", *args, FE_CI_RUNNER_NAME="r1", **env)


def stage_processes(svc: Service) -> list[int]:
    """The processes of the stages of the runner started by ``start_runner``: in its job
    directories (its cache dir's jobs/), or, forked from a warm parent, in that parent's rooms."""
    cache = Path(svc.runner_env()["FE_CI_CACHE_DIR"])
    rooms = sorted((cache / "zygotes").glob("*/*/rooms"))  # the runner's folder, a layer's
    return [pid for where in (cache / "jobs", *rooms) for pid in processes_in(where)]


def stage(r: dict, name: str) -> dict:
    return next(s for j in r["jobs"] for s in j["stages"] if s["name"] == name)


def test_hang_times_out_crash_is_reported_and_the_runner_goes_on(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service()
    hang = submit_wheel(svc, make_wheel(tmp_path / "w1", "9.0.1", HANG))
    crash = submit_wheel(svc, make_wheel(tmp_path / "w2", "9.0.2", SEGFAULT))
    # long enough for the crashing import to crash on a loaded machine (its probe, a warm fork,
    # took 2.7 s at a load of 5 on 2 cores); the hang outlives it
    runner = start_runner(svc, tmp_path, FE_CI_STAGE_TIMEOUT_S="12")
    try:
        r1 = wait_for(svc, hang, lambda r: r["status"] == "finished")
        r2 = wait_for(svc, crash, lambda r: r["status"] == "finished")
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=60)
    probe = stage(r1, "probe")
    assert probe["status"] == "timeout" and "killed after" in probe["reason"], probe
    assert r1["verdict"] == "error"
    probe = stage(r2, "probe")
    assert probe["status"] == "crashed" and "SIGSEGV" in probe["reason"], probe
    assert "about to crash" in probe["log_tail"]
    assert r2["verdict"] == "error"
    # nothing of the hung stage survives: no process of this runner's stages still runs
    assert stage_processes(svc) == []


def test_a_wheel_whose_cudnn_import_raises_fails_on_a_cpu_only_service(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Was ``pass``: with no subject importable, every one was not applicable."""
    svc: Service = make_service()
    build_id = submit_wheel(svc, make_wheel(tmp_path / "w", "1.32.0", BROKEN))
    runner = start_runner(svc, tmp_path, "--once")
    try:
        r = wait_for(svc, build_id, lambda r: r["status"] == "finished")
    finally:
        runner.wait(timeout=120)
    assert r["verdict"] == "fail", r["verdict_reason"]
    (probe,) = [c for c in r["causes"] if c["kind"] == "stage" and c["name"] == "probe"]
    assert probe["status"] == "fail"
    assert probe["reason"].startswith("the candidate is unusable: import cudnn raised"), probe
    (whole,) = [f for f in r["findings"] if f["subject"] is None]
    assert (whole["kind"], whole["severity"]) == ("import_error", "error")
    assert "RuntimeError: cudnn was built without its kernels" in whole["message"]
    assert stage(r, "probe")["status"] == "fail"


def test_cancel_stops_the_running_stage(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_LEASE_SECONDS="3")
    build_id = submit_wheel(svc, make_wheel(tmp_path / "w", "9.0.3", HANG))
    runner = start_runner(svc, tmp_path, FE_CI_STAGE_TIMEOUT_S="600")
    try:
        wait_for(
            svc,
            build_id,
            lambda r: any(s["name"] == "install" for j in r["jobs"] for s in j["stages"]),
        )
        # the install stage is reported: what runs of the job now is the probe, hanging in the
        # candidate's import
        eventually(lambda: stage_processes(svc), message="the probe's process")
        resp = svc.http().post(f"/api/builds/{build_id}/cancel")
        assert resp.status_code == 200
        r = wait_for(svc, build_id, lambda r: r["status"] == "cancelled")
        assert r["verdict"] == "cancelled"
        eventually(
            lambda: stage_processes(svc),
            until=lambda pids: not pids,
            timeout=30,
            interval=0.3,
            message="the cancelled stage's processes to end",
        )
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=60)
    assert "event=job_cancelled" in (tmp_path / "runner.log").read_text()


def test_an_idle_runner_claims_again_as_soon_as_a_long_poll_ends_empty(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The service holds each empty claim for the claim wait (1 s here); the runner asks again at
    once instead of pausing for its poll interval (60 s here), so a job submitted meanwhile is
    taken on the next poll."""
    svc: Service = make_service()
    runner = start_runner(svc, tmp_path, FE_CI_CLAIM_WAIT_S="1", FE_CI_POLL_INTERVAL_S="60")
    try:
        # three held polls, back to back: seconds apart, where pausing between them would take
        # two poll intervals (120 s); the bound leaves room for a slow start on a loaded machine
        eventually(
            (tmp_path / "runner.log").read_text,
            until=lambda log: log.count("/api/jobs/claim") >= 3,
            timeout=60,
            interval=0.2,
            message="three claims in the runner's log",
        )
        # a candidate that does not import: its job ends at the probe, and SIGTERM waits for it
        build = submit_wheel(svc, make_wheel(tmp_path / "w", "9.0.3", BROKEN))
        r = wait_for(svc, build, lambda r: r["jobs"][0]["status"] != "queued", timeout=30)
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=60)
    assert r["jobs"][0]["runner"] == "r1"
