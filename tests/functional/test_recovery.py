"""Nothing is lost, with real processes on 127.0.0.1: a runner killed mid-job, a service killed
mid-upload, a service that goes away while a runner holds a job (back within the lease, or not).

Leases and sweeps are shortened through the environment; the candidates are constructed wheels
whose import sleeps (testkit/wheels.py), so a job lasts long enough to act on it mid-way.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit import loopback, processes
from testkit.service import SUBMIT, Service
from testkit.waiting import eventually
from testkit.wheels import make_big_wheel, make_wheel, sleepy
from tests.helpers import logged, stage_body, submit_wheel, wait_for
from tests.helpers import stop_process as stop
from tests.tap import read_tap

pytestmark = pytest.mark.slow  # killed and frozen runners and services: minutes of waiting

CPU_STAGES = ["install", "probe", "refusal"]


def start_runner(
    svc: Service, tmp_path: Path, name: str, *, tap: Path | None = None, **env: str
) -> processes.Process:
    """``fe-ci runner`` as its own process (through tests/tap.py when ``tap`` is given)."""
    module = ("tests.tap", str(tap)) if tap else ("cli.main",)
    settings = {
        "FE_CI_RUNNER_NAME": name,
        "FE_CI_STAGE_TIMEOUT_S": "120",
        "FE_CI_POLL_INTERVAL_S": "0.2",
        "FE_CI_CLAIM_WAIT_S": "1",
        "FE_CI_RETRY_INITIAL_S": "0.1",
        "FE_CI_RETRY_MAX_S": "0.5",
        **env,
    }
    return svc.start_runner(tmp_path / f"{name}.log", module=module, **settings)


def has_stage(name: str, attempt: int = 1):  # type: ignore[no-untyped-def]
    return lambda r: any(
        j["attempt"] == attempt and any(s["name"] == name for s in j["stages"]) for j in r["jobs"]
    )


def stage_rows(svc: Service, job_id: int) -> list[str]:
    with svc.db() as conn:
        rows = conn.execute("SELECT name FROM stages WHERE job_id = ? ORDER BY id", (job_id,))
        return [str(name) for (name,) in rows]


def test_runner_killed_mid_job_is_replaced_and_its_late_posts_refused(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_LEASE_SECONDS="3", FE_CI_SWEEP_INTERVAL_S="0.3")
    build_id = submit_wheel(svc, make_wheel(tmp_path / "w", "9.2.0", sleepy(2)))
    tap = tmp_path / "r1.tap"
    r1 = start_runner(svc, tmp_path, "r1", tap=tap)
    r2: processes.Process | None = None
    try:
        wait_for(svc, build_id, has_stage("install"))  # the probe now sleeps in the import
        r1.send_signal(signal.SIGKILL)
        r1.wait(timeout=10)
        r2 = start_runner(svc, tmp_path, "r2")
        r = wait_for(svc, build_id, lambda r: r["status"] == "finished")
    finally:
        stop(r1)
        if r2 is not None:
            stop(r2)
    (job,) = r["jobs"]
    assert (job["attempt"], job["runner"], job["status"]) == (2, "r2", "finished")
    assert not job["reason"], job["reason"]
    assert [s["name"] for s in job["stages"]] == CPU_STAGES
    # exactly one set of results in the store: attempt 1's install row went with its lease
    assert stage_rows(svc, job["id"]) == CPU_STAGES
    # the dead runner's late posts, replayed with its own tokens, are refused
    (dead,) = read_tap(tap)
    lease = dead["lease"]
    assert lease["job_id"] == job["id"] and lease["attempt"] == 1
    http = svc.http(dead["runner_token"])
    token = lease["lease_token"]
    for path, body in [
        ("stages", stage_body(token, "probe", "fail")),
        ("heartbeat", {"lease_token": token}),
        ("finish", {"lease_token": token, "error": "late"}),
    ]:
        resp = http.post(f"/api/jobs/{job['id']}/{path}", json=body)
        assert resp.status_code == 409, (path, resp.text)
        assert resp.json()["error"]["code"] == "stale_lease"
    resp = http.get(f"/api/jobs/{job['id']}/wheel", headers={"X-Lease-Token": token})
    assert resp.status_code == 409
    assert stage_rows(svc, job["id"]) == CPU_STAGES
    assert loopback.get(f"{svc.url}/api/builds/{build_id}").json() == r


def _data_files(data_dir: Path) -> set[str]:
    """Every file under the data dir, less SQLite's own WAL and shared-memory files."""
    return {
        str(p.relative_to(data_dir))
        for p in data_dir.rglob("*")
        if p.is_file() and not p.name.startswith("fe-ci.sqlite3-")
    }


def _multipart_head(boundary: str, filename: str) -> bytes:
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="wheel"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()


def _slow_body(head: bytes, stop: threading.Event) -> Iterator[bytes]:
    yield head
    for _ in range(400):  # at most 400 MiB; the test stops it long before
        if stop.is_set():
            return
        yield os.urandom(1 << 20)
        time.sleep(0.02)


def test_service_killed_mid_upload_keeps_the_queue_and_leaves_nothing(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_MAX_UPLOAD_MB="1000")
    queued = submit_wheel(svc, make_wheel(tmp_path / "w", "9.2.1", ""))
    before = _data_files(svc.data_dir)
    boundary = "fe-ci-slow-upload"
    head = _multipart_head(boundary, "nvidia_cudnn_frontend-9.2.2-py3-none-any.whl")
    stop_body = threading.Event()
    outcome: list[object] = []

    def upload() -> None:
        try:
            outcome.append(
                loopback.post(
                    f"{svc.url}/validate",
                    content=_slow_body(head, stop_body),
                    headers={
                        "Authorization": f"Bearer {SUBMIT}",
                        "Content-Type": f"multipart/form-data; boundary={boundary}",
                    },
                    timeout=60,
                )
            )
        except httpx.TransportError as exc:
            outcome.append(exc)

    client = threading.Thread(target=upload)
    client.start()
    tmp = svc.data_dir / "tmp"
    try:
        parts = eventually(
            lambda: list(tmp.glob("live-*/upload-*.part")),
            until=lambda parts: parts and parts[0].stat().st_size >= 8 << 20,
            timeout=60,
            interval=0.05,
            message="8 MiB of the upload in the service's temp dir",
        )
        svc.stop(signal.SIGKILL)
    finally:
        stop_body.set()
        client.join(timeout=60)
    assert outcome and isinstance(outcome[0], httpx.TransportError), outcome
    # a killed process cannot clean up: its partial upload is still there ...
    assert [p for p in tmp.rglob("*") if p.is_file()] == [parts[0]]
    svc.start()
    # ... until the service starts again, which sweeps it (its area's lock died with it)
    assert list(tmp.iterdir()) == []
    assert _data_files(svc.data_dir) == before
    assert (svc.count("builds"), svc.count("jobs")) == (1, 1)
    with svc.db() as conn:
        assert conn.execute("SELECT state FROM jobs").fetchone()[0] == "queued"
    runner = start_runner(svc, tmp_path, "r1")
    try:
        r = wait_for(svc, queued, lambda r: r["status"] == "finished")
    finally:
        stop(runner)
    assert [s["name"] for s in r["jobs"][0]["stages"]] == CPU_STAGES
    assert svc.count("builds") == 1


def test_a_starting_replica_leaves_another_ones_upload_in_flight_alone(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Two service processes over one data dir (replicas): the second one's start-up sweep must
    not remove the first one's upload in flight, which then completes and is stored."""
    first: Service = make_service()
    wheel = make_big_wheel(tmp_path / "w", 16)
    data = wheel.read_bytes()
    boundary = "fe-ci-replica"
    half = threading.Event()
    go_on = threading.Event()

    def body() -> Iterator[bytes]:
        yield _multipart_head(boundary, wheel.name)
        for at in range(0, len(data), 1 << 20):
            if at >= len(data) // 2 and not half.is_set():
                half.set()
                go_on.wait(60)
            yield data[at : at + (1 << 20)]
        yield f"\r\n--{boundary}--\r\n".encode()

    outcome: list[httpx.Response] = []
    client = threading.Thread(
        target=lambda: outcome.append(
            loopback.post(
                f"{first.url}/validate",
                content=body(),
                headers={
                    "Authorization": f"Bearer {SUBMIT}",
                    "Content-Type": f"multipart/form-data; boundary={boundary}",
                },
                timeout=60,
            )
        )
    )
    client.start()
    second = Service(data_dir=first.data_dir, env=first.env)
    try:
        assert half.wait(60)
        eventually(
            lambda: any(p.stat().st_size for p in (first.data_dir / "tmp").rglob("*.part")),
            timeout=30,
            interval=0.05,
            message="the first service to write the upload",
        )
        second.start()  # its start sweeps the temp dir
    finally:
        go_on.set()
        client.join(timeout=60)
        second.stop()
    (resp,) = outcome
    assert resp.status_code == 202, resp.text
    r = loopback.get(f"{first.url}/api/builds/{resp.json()['build_id']}").json()
    assert r["sha256"] == hashlib.sha256(data).hexdigest()
    assert [p for p in (first.data_dir / "tmp").rglob("*") if p.is_file()] == []


def test_runner_keeps_its_job_through_a_short_service_outage(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The service is away for 5 s of a 15 s lease, while the probe stage ends: the runner holds
    on, keeps the stage's result for later (the next stage runs meanwhile), reports it when the
    service is back, and finishes the job as attempt 1."""
    svc: Service = make_service(FE_CI_LEASE_SECONDS="15", FE_CI_SWEEP_INTERVAL_S="0.3")
    build_id = submit_wheel(svc, make_wheel(tmp_path / "w", "9.2.3", sleepy(1)))
    runner = start_runner(svc, tmp_path, "r1")
    try:
        wait_for(svc, build_id, has_stage("install"))
        svc.stop(signal.SIGKILL)
        # the outage lasts until the probe has ended and its post failed: the result must wait
        eventually(logged(tmp_path / "r1.log", "event=post_failed"), timeout=60)
        svc.start()
        r = wait_for(svc, build_id, lambda r: r["status"] == "finished")
        assert runner.poll() is None  # still serving
    finally:
        stop(runner)
    (job,) = r["jobs"]
    assert (job["attempt"], job["runner"], job["status"]) == (1, "r1", "finished")
    assert [s["name"] for s in job["stages"]] == CPU_STAGES
    assert job["stages"][1]["status"] != "error", job["stages"][1]
    log = (tmp_path / "r1.log").read_text()
    assert "event=post_failed" in log  # the probe's result waited for the service
    assert "event=job_abandoned" not in log


def test_runner_abandons_a_job_cleanly_past_the_lease_and_goes_on(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The service is away longer than the lease: the runner stops the stage, reports nothing
    for that attempt, removes its work dir, and takes the job again (attempt 2) once it is back."""
    svc: Service = make_service(FE_CI_LEASE_SECONDS="3", FE_CI_SWEEP_INTERVAL_S="0.3")
    build_id = submit_wheel(svc, make_wheel(tmp_path / "w", "9.2.4", sleepy(2)))
    runner = start_runner(svc, tmp_path, "r1")
    log_path = tmp_path / "r1.log"
    try:
        r = wait_for(svc, build_id, has_stage("install"))
        job_id = r["jobs"][0]["id"]
        work = tmp_path / "runner-cache" / "jobs" / f"job-{job_id}-1"
        assert work.is_dir()
        svc.stop(signal.SIGKILL)
        eventually(logged(log_path, "event=job_abandoned"), timeout=60, interval=0.2)
        assert not work.exists()
        assert runner.poll() is None  # it goes on, waiting for the service
        svc.start()
        r = wait_for(svc, build_id, lambda r: r["status"] == "finished")
    finally:
        stop(runner)
    log = log_path.read_text()
    assert f"event=job_abandoned job={job_id} attempt=1 work_dir_removed=True" in log
    assert "event=lease_abandoned" in log
    (job,) = r["jobs"]
    assert (job["attempt"], job["runner"], job["status"]) == (2, "r1", "finished")
    assert stage_rows(svc, job_id) == CPU_STAGES


def test_a_frozen_runner_thawed_after_its_lease_is_refused_and_goes_on(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A runner process stopped (SIGSTOP: a frozen host, a debugger) past its lease while another
    runner takes its job; thawed (SIGCONT), it comes back from the dead: its heartbeat and its
    stage post get 409, it abandons the attempt without reporting, and keeps serving."""
    svc: Service = make_service(FE_CI_LEASE_SECONDS="3", FE_CI_SWEEP_INTERVAL_S="0.3")
    build_id = submit_wheel(svc, make_wheel(tmp_path / "w", "9.2.5", sleepy(2)))
    r1 = start_runner(svc, tmp_path, "r1")
    r2: processes.Process | None = None
    log_path = tmp_path / "r1.log"
    try:
        r = wait_for(svc, build_id, has_stage("install"))
        job_id = r["jobs"][0]["id"]
        r1.send_signal(signal.SIGSTOP)
        r2 = start_runner(svc, tmp_path, "r2")
        wait_for(svc, build_id, lambda r: r["jobs"][0]["runner"] == "r2")  # attempt 2 is r2's
        r1.send_signal(signal.SIGCONT)
        eventually(logged(log_path, "event=job_abandoned"), timeout=60, interval=0.2)
        r = wait_for(svc, build_id, lambda r: r["status"] == "finished")
        assert r1.poll() is None  # still serving
    finally:
        r1.send_signal(signal.SIGCONT)
        stop(r1)
        if r2 is not None:
            stop(r2)
    (job,) = r["jobs"]
    assert (job["attempt"], job["runner"], job["status"]) == (2, "r2", "finished")
    assert stage_rows(svc, job_id) == CPU_STAGES
    log = log_path.read_text()
    assert f"event=job_abandoned job={job_id} attempt=1 work_dir_removed=True" in log
    assert "stale_lease" in log  # what the service answered the thawed runner
    assert "event=job_finished" not in log
