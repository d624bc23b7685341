"""The runner rides out outages and restarts at once, with real processes on 127.0.0.1: a real
``fe-ci serve``, real ``fe-ci runner`` processes and, between them where a test says so, the proxy
of testkit/proxy.py answering 503 with Retry-After or dropping connections for a while.

Back-off is shortened through the environment (``FE_CI_RETRY_INITIAL_S``, ``FE_CI_RETRY_MAX_S``),
so no test sleeps long; the times themselves are measured by bench/restarts.py.
"""

from __future__ import annotations

import signal
import socket
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.wire import Environment, JobKind, JobLease, Stage
from runner.agent.state import Identity, KeptResult, State
from testkit import loopback, processes
from testkit.proxy import Proxy
from testkit.service import Service
from testkit.waiting import eventually
from testkit.wheels import make_wheel, sleepy
from tests.helpers import logged, register, report, submit_wheel, wait_for
from tests.helpers import stop_process as stop

pytestmark = pytest.mark.slow  # runners riding out outages of a real service: minutes of waiting

CPU_STAGES = ["install", "probe", "refusal"]


def start_runner(
    svc: Service, tmp_path: Path, log: str = "r1", url: str | None = None, **env: str
) -> processes.Process:
    """``fe-ci runner`` named r1 (its cache dir the service's runner cache), logging to LOG.log."""
    settings = {
        "FE_CI_RUNNER_NAME": "r1",
        "FE_CI_STAGE_TIMEOUT_S": "120",
        "FE_CI_POLL_INTERVAL_S": "0.2",
        "FE_CI_CLAIM_WAIT_S": "1",
        "FE_CI_RETRY_INITIAL_S": "0.1",
        "FE_CI_RETRY_MAX_S": "0.5",
        "FE_CI_WARM_WORKERS": "false",
        **({"FE_CI_URL": url} if url else {}),
        **env,
    }
    return svc.start_runner(tmp_path / f"{log}.log", **settings)


def results_dir(svc: Service) -> Path:
    return Path(svc.runner_env()["FE_CI_CACHE_DIR"]) / "state" / "runner-r1" / "results"


def last_seen(svc: Service, name: str) -> str:
    with sqlite3.connect(svc.data_dir / "fe-ci.sqlite3") as db:
        row = db.execute("SELECT last_seen_at FROM runners WHERE name = ?", (name,)).fetchone()
    return str(row[0]) if row else ""


def wait_claim_waiting(svc: Service, log: Path, name: str = "r1") -> None:
    """Until the runner registered (or resumed) and the service is holding its claim: the
    service marks the runner seen at each turn of the claim's wait."""
    eventually(
        lambda: "event=registered" in log.read_text() or "event=resumed" in log.read_text(),
        timeout=120,
        message="up",
    )
    seen = last_seen(svc, name)
    eventually(
        lambda: last_seen(svc, name) != seen,
        timeout=120,
        message="the service holds a claim of the runner",
    )


def finished(r: dict) -> bool:
    return r["status"] == "finished"


def the_job(r: dict) -> tuple[int, str, str]:
    (job,) = r["jobs"]
    assert not job["reason"], job["reason"]
    assert [s["name"] for s in job["stages"]] == CPU_STAGES
    return job["attempt"], job["runner"], job["status"]


def test_the_runner_rides_out_503s_and_dropped_connections(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """503s with Retry-After and dropped connections at registration and in the middle of a job:
    the runner keeps going (it used to die on the first 503) and the build finishes as attempt 1."""
    svc: Service = make_service(FE_CI_LEASE_SECONDS="15")
    log = tmp_path / "r1.log"
    with Proxy(svc.port) as proxy:
        proxy.fail("unavailable", retry_after=1)
        runner = start_runner(svc, tmp_path, url=proxy.url)
        try:
            eventually(
                lambda: proxy.counts["unavailable"] >= 2,
                timeout=120,
                message="registration was answered 503 twice",
            )
            proxy.fail("drop")
            eventually(
                lambda: proxy.counts["dropped"] >= 2,
                timeout=120,
                message="two requests were dropped",
            )
            proxy.heal()
            eventually(
                logged(log, "event=registered"), timeout=120, message="the runner registered"
            )
            build = submit_wheel(svc, make_wheel(tmp_path / "w", "9.3.0", sleepy(2)))
            wait_for(
                svc, build, lambda r: any(s["name"] == "install" for s in r["jobs"][0]["stages"])
            )
            refused, dropped = proxy.counts["unavailable"], proxy.counts["dropped"]
            proxy.fail("unavailable", retry_after=1)
            eventually(
                lambda: proxy.counts["unavailable"] > refused,
                timeout=120,
                message="a request mid-job got a 503",
            )
            proxy.fail("drop")
            eventually(
                lambda: proxy.counts["dropped"] > dropped,
                timeout=120,
                message="a request mid-job was dropped",
            )
            proxy.heal()
            r = wait_for(svc, build, finished)
            assert runner.poll() is None  # still serving
        finally:
            code = stop(runner)
    assert code == 0
    assert the_job(r) == (1, "r1", "finished")
    text = log.read_text()
    # the wait the 503 asked for, not the back-off (at most 0.5 s here)
    assert "event=retrying call=register attempt=1 in_s=1.0" in text, text[-3000:]
    assert "ConnectError" in text or "RemoteProtocolError" in text or "ReadError" in text


def _kept_through_a_refused_finish(svc: Service, proxy: Proxy, tmp_path: Path) -> Path:
    """Runner r1 runs the build's job while every ``/finish`` answers 503, and is stopped: the
    result it kept on disk."""
    proxy.fail("unavailable", path=r"/finish$", retry_after=None)
    first = start_runner(svc, tmp_path, url=proxy.url)
    try:
        eventually(
            logged(tmp_path / "r1.log", "call=finish"),
            timeout=120,
            message="the job's end was refused",
        )
    finally:
        assert stop(first) == 0
    (kept,) = results_dir(svc).glob("job-*.json")
    return kept


def test_a_result_kept_through_an_outage_is_sent_by_the_restarted_runner(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The job's end is refused (503) until the runner is stopped: its result stays on disk, and
    the runner started again sends it: the job finishes as attempt 1, nothing ran twice."""
    svc: Service = make_service()
    build = submit_wheel(svc, make_wheel(tmp_path / "w", "9.3.1", "VALUE = 1\n"))
    with Proxy(svc.port) as proxy:
        kept = _kept_through_a_refused_finish(svc, proxy, tmp_path)
        assert kept.stat().st_mode & 0o777 == 0o600
        assert report(svc, build)["jobs"][0]["status"] == "leased"  # still this runner's lease
        proxy.heal()
        second = start_runner(svc, tmp_path, "r1-again", url=proxy.url)
        try:
            r = wait_for(svc, build, finished)
        finally:
            stop(second)
    assert the_job(r) == (1, "r1", "finished")
    assert not kept.exists()
    text = (tmp_path / "r1-again.log").read_text()
    assert "event=resumed runner=r1" in text and "event=job_finished" in text, text[-3000:]
    assert "event=job_claimed" not in text  # sent, not run again


def test_a_kept_result_whose_lease_is_gone_is_dropped_and_the_job_runs_again(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The kept result's lease expires while the runner is down: the restarted runner's result
    is refused (409), dropped with a log line, and the runner runs the job's next attempt."""
    svc: Service = make_service(FE_CI_LEASE_SECONDS="3", FE_CI_SWEEP_INTERVAL_S="0.3")
    build = submit_wheel(svc, make_wheel(tmp_path / "w", "9.3.2", "VALUE = 1\n"))
    with Proxy(svc.port) as proxy:
        kept = _kept_through_a_refused_finish(svc, proxy, tmp_path)
        wait_for(svc, build, lambda r: r["jobs"][0]["attempt"] == 2)  # the lease expired
        proxy.heal()
        second = start_runner(svc, tmp_path, "r1-again", url=proxy.url)
        try:
            r = wait_for(svc, build, finished)
        finally:
            stop(second)
    assert the_job(r) == (2, "r1", "finished")
    assert not kept.exists()
    job_id = r["jobs"][0]["id"]
    text = (tmp_path / "r1-again.log").read_text()
    assert f"event=kept_result_dropped job={job_id} attempt=1 reason=409" in text, text[-3000:]


def test_sigterm_takes_an_idle_runner_offline_without_waiting_out_its_long_poll(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """An idle runner in a 30 s long poll, stopped: it tells the service and exits without the
    claim's answer (it used to wait the poll out), and the service shows it offline."""
    svc: Service = make_service()
    log = tmp_path / "r1.log"
    runner = start_runner(svc, tmp_path, FE_CI_CLAIM_WAIT_S="30")
    try:
        wait_claim_waiting(svc, log)
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=60) == 0
    finally:
        stop(runner)
    after_stop = log.read_text().split("event=stop_requested", 1)[1]
    assert "/api/jobs/claim" not in after_stop, after_stop  # the long poll was not waited out
    assert "event=offline runner=r1" in after_stop
    page = loopback.get(f"{svc.url}/runners").text
    row = page.split('data-runner="r1"', 1)[1].split("</tr>", 1)[0]
    assert ">offline<" in row, row


def test_a_runner_killed_and_restarted_resumes_and_takes_the_next_build(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL mid long poll, started again at once: the runner resumes its identity from disk
    (it used to get 409 runner_name_in_use for two lease periods), and the build submitted next
    is taken by the live runner as attempt 1, never by the dead one's abandoned claim."""
    svc: Service = make_service()
    first = start_runner(svc, tmp_path, FE_CI_CLAIM_WAIT_S="30")
    wait_claim_waiting(svc, tmp_path / "r1.log")
    first.kill()
    first.wait()
    second = start_runner(svc, tmp_path, "r1-again", FE_CI_CLAIM_WAIT_S="30")
    log = tmp_path / "r1-again.log"
    try:
        eventually(
            logged(log, "event=resumed runner=r1"), timeout=120, message="the runner resumed"
        )
        build = submit_wheel(svc, make_wheel(tmp_path / "w", "9.3.3", "VALUE = 1\n"))
        r = wait_for(svc, build, finished)
    finally:
        stop(second)
    assert the_job(r) == (1, "r1", "finished")
    text = log.read_text()
    assert "name_in_use" not in text and "event=registered" not in text
    assert f"event=job_claimed job={r['jobs'][0]['id']}" in text
    assert svc.count("runners") == 1


def test_a_claim_whose_client_went_away_takes_no_job(service: Service, tmp_path: Path) -> None:
    """A long poll whose connection closes (its runner killed) is over: the job submitted next
    goes to a live claim, not to the abandoned one (which used to take it and hold it until the
    lease ran out)."""
    gone = register(service, "gone-1")
    body = b'{"wait_s": 30}'
    raw = socket.create_connection(("127.0.0.1", service.port))
    raw.sendall(
        b"POST /api/jobs/claim HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Authorization: {gone.headers['authorization']}\r\n".encode()
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    seen = last_seen(service, "gone-1")
    eventually(
        lambda: last_seen(service, "gone-1") != seen,
        timeout=120,
        message="the service holds the claim",
    )
    raw.close()
    build = submit_wheel(service, make_wheel(tmp_path / "w", "9.3.4", "VALUE = 1\n"))
    live = register(service, "live-1")
    resp = live.post("/api/jobs/claim", json={"wait_s": 10})
    assert resp.status_code == 200, resp.text
    lease = resp.json()
    assert (lease["build_id"], lease["attempt"]) == (build, 1)
    assert report(service, build)["jobs"][0]["runner"] == "live-1"


def test_resume_and_offline_hand_back_the_jobs_the_runner_does_not_hold(
    service: Service, tmp_path: Path
) -> None:
    """A restarted runner's earlier leases go back to the queue at once (as the next attempt),
    but for those whose results it kept; a stopping runner's likewise."""
    runner = register(service, "r1")
    builds = [
        submit_wheel(service, make_wheel(tmp_path / f"w{i}", f"9.3.{5 + i}", "VALUE = 1\n"))
        for i in range(2)
    ]
    kept, lost = (runner.post("/api/jobs/claim", json={}).json() for _ in builds)
    resp = runner.post("/api/runners/resume", json={"labels": {}, "holding": [kept["job_id"]]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["handed_back"] == [lost["job_id"]]
    job = report(service, builds[1])["jobs"][0]
    assert (job["status"], job["attempt"]) == ("queued", 2)
    done = runner.post(
        f"/api/jobs/{kept['job_id']}/finish",
        json={"lease_token": kept["lease_token"], "environment": {}},
    )
    assert done.status_code == 200, done.text  # the kept result's lease held
    again = runner.post("/api/jobs/claim", json={}).json()
    assert (again["job_id"], again["attempt"]) == (lost["job_id"], 2)
    assert runner.post("/api/runners/offline", json={"holding": []}).status_code == 204
    job = report(service, builds[1])["jobs"][0]
    assert (job["status"], job["attempt"]) == ("queued", 3)
    stale = runner.post(
        f"/api/jobs/{again['job_id']}/heartbeat", json={"lease_token": again["lease_token"]}
    )
    assert stale.status_code == 409


def test_the_kept_state_is_private_and_belongs_to_one_service(tmp_path: Path) -> None:
    """The credential and a kept result are 0600 in 0700 directories; a credential kept for
    another service's URL is not used (that runner registers anew); a result file that cannot be
    read is removed rather than sent or left to block the runner."""
    state = State(tmp_path, "r1")
    state.save_identity(Identity(url="http://127.0.0.1:1/", runner_id=7, name="r1", token="t"))
    assert state.credentials.stat().st_mode & 0o777 == 0o600
    assert state.credentials.parent.stat().st_mode & 0o777 == 0o700
    assert state.identity("http://127.0.0.1:1") is not None
    assert state.identity("http://127.0.0.1:2") is None
    lease = JobLease(
        job_id=3, build_id=1, kind=JobKind.cpu, family=None, attempt=1, lease_token="x",
        lease_expires_at=datetime.now(UTC), lease_seconds=120, wheel_url=None,
        wheel_filename=None, wheel_sha256=None, version=None, stages=[Stage.probe],
    )  # fmt: skip
    path = state.keep(KeptResult(lease=lease, stages=[], environment=Environment()))
    assert path.stat().st_mode & 0o777 == 0o600
    assert [kept.lease.job_id for _, kept in state.kept()] == [3] and state.holding() == [3]
    path.write_text('{"lease": ')  # as a disk fault might leave it
    assert state.kept() == [] and not path.exists()
    assert [p.name for p in state.results.iterdir()] == []  # no temporary file left either
