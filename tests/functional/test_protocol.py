"""The runner protocol against a real service on 127.0.0.1: tokens, leases, expiry, 409s, waits."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import httpx
import pytest

from testkit import loopback
from testkit.service import REGISTER, SUBMIT, Service
from testkit.waiting import eventually
from testkit.wheels import make_wheel
from tests.helpers import register, report, stage_body, submit_wheel, wait_for

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small installable frontend wheel: no runner here installs what it claims, so the
    protocol is the same as for the registry's 1.32.0, whose 11 MiB each service would hash and
    check again."""
    return make_wheel(tmp_path_factory.mktemp("wheel"), "9.4.0", "VALUE = 1\n")


def test_each_token_opens_only_its_own_door(module_service: Service) -> None:
    before = module_service.count("builds")
    # the submit token cannot register a runner
    resp = module_service.http(SUBMIT).post("/api/runners/register", json={"name": "x"})
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "unauthorized"
    runner = register(module_service, "r1")
    # a runner token cannot submit
    resp = runner.post("/validate", json={"commit": SHA})
    assert resp.status_code == 401
    # the registration token is not a runner token
    resp = module_service.http(REGISTER).post("/api/jobs/claim", json={})
    assert resp.status_code == 401
    # the submit token cannot drive the runner protocol
    resp = module_service.http(SUBMIT).post("/api/jobs/claim", json={})
    assert resp.status_code == 401
    assert module_service.count("builds") == before


def test_lease_lifecycle_and_a_finished_job_refuses_more(service: Service, wheel: Path) -> None:
    build_id = submit_wheel(service, wheel)
    runner = register(service, "r1")
    lease = runner.post("/api/jobs/claim", json={}).json()
    assert lease["build_id"] == build_id and lease["attempt"] == 1 and lease["kind"] == "cpu"
    assert lease["stages"] == ["install", "probe", "refusal"]
    token = lease["lease_token"]
    job = lease["job_id"]
    # the wheel comes back byte for byte to the lease holder only
    got = runner.get(f"/api/jobs/{job}/wheel", headers={"X-Lease-Token": token})
    assert got.status_code == 200 and got.content == wheel.read_bytes()
    assert (
        runner.get(f"/api/jobs/{job}/wheel", headers={"X-Lease-Token": "nope"}).status_code == 409
    )
    hb = runner.post(f"/api/jobs/{job}/heartbeat", json={"lease_token": token}).json()
    assert hb["cancelled"] is False and hb["lease_expires_at"] >= lease["lease_expires_at"]
    assert runner.post(f"/api/jobs/{job}/stages", json=stage_body(token)).status_code == 201
    assert report(service, build_id)["status"] == "running"
    bad = runner.post(f"/api/jobs/{job}/stages", json=stage_body(token, "determinism"))
    assert bad.status_code == 400  # not a stage of a cpu job
    assert runner.post(f"/api/jobs/{job}/finish", json={"lease_token": token}).status_code == 200
    r = report(service, build_id)
    assert r["status"] == "finished" and r["jobs"][0]["status"] == "finished"
    late = runner.post(f"/api/jobs/{job}/stages", json=stage_body(token, "refusal"))
    assert late.status_code == 409 and late.json()["error"]["code"] in ("stale_lease", "conflict")


def test_one_runner_cannot_post_to_another_runners_job(service: Service, wheel: Path) -> None:
    submit_wheel(service, wheel)
    a, b = register(service, "a"), register(service, "b")
    lease = a.post("/api/jobs/claim", json={}).json()
    resp = b.post(f"/api/jobs/{lease['job_id']}/stages", json=stage_body(lease["lease_token"]))
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "forbidden"


def test_expired_lease_requeues_and_the_late_runner_is_refused(make_service, wheel: Path) -> None:  # type: ignore[no-untyped-def]
    # b's lease must outlast its checks below (a report and a's two refused posts) on a loaded
    # machine: 2 s did not, once in four whole-suite runs
    svc = make_service(FE_CI_LEASE_SECONDS="5", FE_CI_SWEEP_INTERVAL_S="0.3")
    build_id = submit_wheel(svc, wheel)
    a, b = register(svc, "a"), register(svc, "b")
    first = a.post("/api/jobs/claim", json={}).json()
    assert (
        a.post(
            f"/api/jobs/{first['job_id']}/stages", json=stage_body(first["lease_token"])
        ).status_code
        == 201
    )
    assert b.post("/api/jobs/claim", json={}).status_code == 204  # still leased to a
    # a stops heartbeating: b's claim, held by the service, takes the job once a's lease ran out
    second = b.post("/api/jobs/claim", json={"wait_s": 15}).json()
    assert second["job_id"] == first["job_id"] and second["attempt"] == 2
    # the abandoned attempt's results are gone: the build will end with one set
    assert report(svc, build_id)["jobs"][0]["stages"] == []
    late = a.post(
        f"/api/jobs/{first['job_id']}/stages", json=stage_body(first["lease_token"], "refusal")
    )
    assert late.status_code == 409
    late = a.post(f"/api/jobs/{first['job_id']}/finish", json={"lease_token": first["lease_token"]})
    assert late.status_code == 409
    token = second["lease_token"]
    assert b.post(f"/api/jobs/{second['job_id']}/stages", json=stage_body(token)).status_code == 201
    assert (
        b.post(f"/api/jobs/{second['job_id']}/finish", json={"lease_token": token}).status_code
        == 200
    )
    r = report(svc, build_id)
    assert r["jobs"][0]["attempt"] == 2 and r["jobs"][0]["runner"] == "b"
    assert [s["name"] for s in r["jobs"][0]["stages"]] == ["probe"]


def test_an_expired_lease_is_refused_at_once_whether_or_not_the_sweeper_ran(
    make_service, wheel: Path
) -> None:  # type: ignore[no-untyped-def]
    """Was: posts and heartbeats after the lease ran out were accepted, and a heartbeat extended
    it, until the sweeper came round. The sweeper does not run here (once an hour)."""
    svc = make_service(FE_CI_LEASE_SECONDS="1", FE_CI_SWEEP_INTERVAL_S="3600")
    submit_wheel(svc, wheel)
    runner = register(svc, "late")
    lease = runner.post("/api/jobs/claim", json={}).json()
    job, token = lease["job_id"], lease["lease_token"]
    time.sleep(1.5)  # past the 1 s lease, with no heartbeat

    def expires() -> str:
        with svc.db() as conn:
            row = conn.execute("SELECT state, lease_expires_at FROM jobs WHERE id = ?", (job,))
            state, at = row.fetchone()
        assert state == "leased"  # nobody requeued it: only the check at the door refuses
        return str(at)

    held = expires()
    calls = [
        ("heartbeat", {"lease_token": token}),
        ("stages", stage_body(token)),
        ("finish", {"lease_token": token}),
    ]
    for route, body in calls:
        resp = runner.post(f"/api/jobs/{job}/{route}", json=body)
        assert resp.status_code == 409, (route, resp.text)
        error = resp.json()["error"]
        assert error["code"] == "stale_lease" and "expired" in error["message"], error
    resp = runner.get(f"/api/jobs/{job}/wheel", headers={"X-Lease-Token": token})
    assert resp.status_code == 409
    assert expires() == held  # the refused heartbeat did not extend it
    assert svc.count("stages") == 0


def test_third_expiry_ends_the_job_in_error(make_service, wheel: Path) -> None:  # type: ignore[no-untyped-def]
    svc = make_service(FE_CI_LEASE_SECONDS="1", FE_CI_SWEEP_INTERVAL_S="0.2")
    build_id = submit_wheel(svc, wheel)
    a = register(svc, "a")
    for attempt in (1, 2, 3):  # each once the last lease ran out and the sweeper requeued it
        lease = eventually(
            lambda: a.post("/api/jobs/claim", json={}),
            until=lambda resp: resp.status_code == 200,
            timeout=30,
            interval=0.2,
            message=f"attempt {attempt} to be queued",
        ).json()
        assert lease["attempt"] == attempt
    r = wait_for(svc, build_id, lambda r: r["status"] == "finished", timeout=30)
    assert r["jobs"][0]["reason"].startswith("error: the lease expired 3 times")
    assert r["verdict"] == "error"


def test_gpu_family_configured_without_a_runner_waits_then_skips(make_service, wheel: Path) -> None:  # type: ignore[no-untyped-def]
    svc = make_service(
        FE_CI_GPU_ARCHS="sm_90", FE_CI_GPU_WAIT_HOURS="0.0005", FE_CI_SWEEP_INTERVAL_S="0.3"
    )
    build_id = submit_wheel(svc, wheel)
    r = report(svc, build_id)
    gpu = [j for j in r["jobs"] if j["kind"] == "gpu"]
    assert len(gpu) == 1 and gpu[0]["family"] == "sm_90" and gpu[0]["status"] == "queued"
    page = loopback.get(f"{svc.url}/builds/{build_id}").text
    assert "waiting for an sm_90 runner" in page
    # a CPU runner never takes the GPU job
    cpu = register(svc, "cpu")
    lease = cpu.post("/api/jobs/claim", json={}).json()
    assert lease["kind"] == "cpu"
    assert cpu.post("/api/jobs/claim", json={}).status_code == 204
    cpu.post(f"/api/jobs/{lease['job_id']}/finish", json={"lease_token": lease["lease_token"]})
    r = wait_for(  # past FE_CI_GPU_WAIT_HOURS, the sweeper ends it
        svc, build_id, lambda r: r["status"] == "finished", timeout=30
    )
    gpu = next(j for j in r["jobs"] if j["kind"] == "gpu")
    assert gpu["status"] == "finished" and gpu["reason"] == "skipped: no sm_90 runner"
    assert r["verdict"] == "incomplete"


def test_auto_covers_the_families_of_live_runners(make_service, wheel: Path) -> None:  # type: ignore[no-untyped-def]
    svc = make_service(FE_CI_GPU_ARCHS="auto")
    register(svc, "h200", arch="sm_90", gpu="NVIDIA H200")
    build_id = submit_wheel(svc, wheel)
    kinds = sorted((j["kind"], j["family"]) for j in report(svc, build_id)["jobs"])
    assert kinds == [("cpu", None), ("gpu", "sm_90")]


def test_racing_runners_never_share_a_job(service: Service, wheel: Path) -> None:
    with service.http() as http:
        ids = [
            http.post("/validate", json={"commit": f"{i:040x}"}).json()["build_id"]
            for i in range(24)
        ]
    runners = [register(service, f"b{i}", builder="1") for i in range(6)]

    def drain(client: httpx.Client) -> list[int]:
        got = []
        while True:
            resp = client.post("/api/jobs/claim", json={})
            if resp.status_code == 204:
                return got
            got.append(resp.json()["job_id"])

    with concurrent.futures.ThreadPoolExecutor(len(runners)) as pool:
        claimed = [j for got in pool.map(drain, runners) for j in got]
    assert len(claimed) == len(ids) == len(set(claimed))


def test_cancel_stops_queued_jobs_and_tells_the_lease_holder(service: Service, wheel: Path) -> None:
    build_id = submit_wheel(service, wheel)
    runner = register(service, "r")
    lease = runner.post("/api/jobs/claim", json={}).json()
    assert loopback.post(f"{service.url}/api/builds/{build_id}/cancel").status_code == 401
    resp = service.http().post(f"/api/builds/{build_id}/cancel")
    assert resp.status_code == 200 and resp.json()["verdict"] == "cancelled"
    hb = runner.post(
        f"/api/jobs/{lease['job_id']}/heartbeat", json={"lease_token": lease["lease_token"]}
    )
    assert hb.json()["cancelled"] is True


@pytest.mark.parametrize("path", ["/api/builds/999", "/builds/999"])
def test_unknown_build_is_a_404_in_the_error_shape(module_service: Service, path: str) -> None:
    resp = loopback.get(f"{module_service.url}{path}")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"


def test_validation_errors_have_the_one_shape(module_service: Service) -> None:
    resp = module_service.http().post("/validate", json={"commit": "xyz"})
    assert resp.status_code == 400 and set(resp.json()["error"]) == {"code", "message", "detail"}
    resp = loopback.get(f"{module_service.url}/api/builds", params={"limit": 0})
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "validation_error"
