"""Runner names and revocation against a real service and real ``fe-ci runner`` processes: a
revoked name stays revoked until an operator lifts it, and a live runner's name is not taken
over without ``--replace``."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx

from testkit import loopback, processes
from testkit.service import ADMIN, REGISTER, ROOT, Service, service_env
from testkit.waiting import eventually

AUTH = {"Authorization": f"Bearer {REGISTER}"}
ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN}"}


def register(svc: Service, name: str, **extra: object) -> httpx.Response:
    return loopback.post(
        f"{svc.url}/api/runners/register", json={"name": name, "labels": {}, **extra}, headers=AUTH
    )


def claim(svc: Service, token: str) -> int:
    resp = loopback.post(
        f"{svc.url}/api/jobs/claim", json={}, headers={"Authorization": f"Bearer {token}"}
    )
    return resp.status_code


def runner_cli(svc: Service, tmp_path: Path, name: str, *args: str) -> processes.Process:
    env = svc.runner_env(FE_CI_RUNNER_NAME=name, FE_CI_CLAIM_WAIT_S="0")
    with open(tmp_path / f"{name}.log", "ab") as log:
        return processes.popen(
            [sys.executable, "-m", "cli.main", "runner", "--once", *args],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def test_a_revoked_name_stays_revoked_until_an_operator_lifts_it(service: Service) -> None:
    """Was: registering again with the shared token re-issued a token and cleared the
    revocation, so a revoked runner came straight back and claimed jobs."""
    first = register(service, "r1").json()
    assert (
        loopback.post(
            f"{service.url}/api/runners/{first['runner_id']}/revoke", headers=ADMIN_AUTH
        ).status_code
        == 204
    )
    assert claim(service, first["token"]) == 403
    for extra in ({}, {"replace": True}):
        again = register(service, "r1", **extra)
        assert again.status_code == 403, again.text
        assert again.json()["error"]["code"] == "runner_revoked"
        assert f"/api/runners/{first['runner_id']}/reinstate" in again.json()["error"]["message"]
    # the operator lifts it: the name may register again; the revoked token stays dead
    assert (
        loopback.post(
            f"{service.url}/api/runners/{first['runner_id']}/reinstate", headers=ADMIN_AUTH
        ).status_code
        == 204
    )
    assert claim(service, first["token"]) == 401
    back = register(service, "r1")
    assert back.status_code == 200 and back.json()["runner_id"] == first["runner_id"]
    assert claim(service, back.json()["token"]) == 204


def test_a_live_runners_name_is_not_taken_over_without_replace(service: Service) -> None:
    """Was: registering under an existing name silently took it over and invalidated the real
    runner's token."""
    real = register(service, "gpu-1").json()
    assert claim(service, real["token"]) == 204
    taken = register(service, "gpu-1")
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "runner_name_in_use"
    assert claim(service, real["token"]) == 204  # the real runner is untouched
    replaced = register(service, "gpu-1", replace=True)
    assert replaced.status_code == 200
    assert claim(service, real["token"]) == 401 and claim(service, replaced.json()["token"]) == 204


def test_a_name_gone_offline_registers_again(make_service) -> None:  # type: ignore[no-untyped-def]
    """A runner restarted after its name went offline (two lease periods unseen) may register."""
    svc: Service = make_service(FE_CI_LEASE_SECONDS="1")
    old = register(svc, "r2").json()
    eventually(  # once two 1 s lease periods passed without a call: offline
        lambda: register(svc, "r2"),
        until=lambda resp: resp.status_code == 200,
        timeout=30,
        interval=0.25,
        message="the offline name to register again",
    )
    assert claim(svc, old["token"]) == 401


def test_the_runner_cli_waits_for_a_live_name_and_replace_takes_it(
    service: Service, tmp_path: Path
) -> None:
    real = register(service, "host-a").json()
    waiting = runner_cli(service, tmp_path, "host-a")
    log = tmp_path / "host-a.log"

    def told() -> bool:
        assert waiting.poll() is None, log.read_text()
        return "event=name_in_use" in log.read_text()

    eventually(told, timeout=60, message="the runner to be told its name is in use")
    waiting.send_signal(signal.SIGTERM)
    assert waiting.wait(30) == 0
    assert claim(service, real["token"]) == 204  # never taken over
    replacing = runner_cli(service, tmp_path, "host-a", "--replace")
    assert replacing.wait(60) == 0, log.read_text()
    assert "event=registered runner=host-a" in log.read_text()
    assert claim(service, real["token"]) == 401


def test_a_name_whose_runner_stopped_cleanly_registers_again(service: Service) -> None:
    """A runner that said it stopped (``POST /api/runners/offline``) is offline at once: its
    name is free without waiting two lease periods."""
    old = register(service, "r3").json()
    assert register(service, "r3").status_code == 409
    resp = loopback.post(
        f"{service.url}/api/runners/offline", headers={"Authorization": f"Bearer {old['token']}"}
    )
    assert resp.status_code == 204
    again = register(service, "r3")
    assert again.status_code == 200, again.text
    assert claim(service, old["token"]) == 401


def test_revoking_needs_the_admin_token_which_registers_nothing(tmp_path: Path) -> None:
    """Was: revoke and reinstate took the registration token, which every runner host holds, so
    any runner could revoke the others. Unset, the admin token is generated into the data dir's
    tokens.env (0600), like the others."""
    env = service_env(tmp_path / "data")
    del env["FE_CI_ADMIN_TOKEN"]
    svc = Service(data_dir=tmp_path / "data", env=env).start()
    try:
        runner = register(svc, "r1").json()
        revoke = f"{svc.url}/api/runners/{runner['runner_id']}/revoke"
        for token in (REGISTER, runner["token"], ADMIN):  # ADMIN: not this service's
            resp = loopback.post(revoke, headers={"Authorization": f"Bearer {token}"})
            assert resp.status_code == 401, resp.text
            assert resp.json()["error"]["message"] == "invalid admin token"
        assert claim(svc, runner["token"]) == 204  # still works: nothing was revoked
        saved = (tmp_path / "data" / "tokens.env").read_text()
        (admin,) = [ln.split("=", 1)[1] for ln in saved.splitlines() if "ADMIN_TOKEN" in ln]
        assert (tmp_path / "data" / "tokens.env").stat().st_mode & 0o777 == 0o600
        resp = loopback.post(
            f"{svc.url}/api/runners/register",
            json={"name": "r2", "labels": {}},
            headers={"Authorization": f"Bearer {admin}"},
        )
        assert resp.status_code == 401  # the admin token does not register
        resp = loopback.post(revoke, headers={"Authorization": f"Bearer {admin}"})
        assert resp.status_code == 204
        assert claim(svc, runner["token"]) == 403
    finally:
        svc.stop()
