"""Outgoing notifications against a real service (uvicorn on 127.0.0.1) and a real HTTP receiver on
loopback that checks each body's signature: a watched branch turns red, then green again; a
receiver that fails twice gets the notification on the third attempt; a receiver that is down
while the service restarts still gets it (the outbox).

The commit builds are driven through the real runner protocol by a scripted builder (register,
claim, upload the wheel, post the stages, finish), which decides each build's outcome: the
colour of a branch is what this file tests, not the runner.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit import loopback
from testkit.service import Service, free_port, service_env
from testkit.waiting import eventually
from testkit.wheels import make_wheel
from tests.helpers import push, register, send

SECRET = "notify-secret-for-tests"


class Receiver:
    """A real HTTP server on 127.0.0.1: answers each POST with the next status of ``answers``
    (then 200), records what it got and whether the signature matched."""

    def __init__(self, port: int = 0, answers: list[int] | None = None) -> None:
        self.answers = list(answers or [])
        self.got: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                want = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                given = self.headers.get("X-FE-CI-Signature-256", "")
                outer.got.append(
                    {
                        "body": json.loads(body),
                        "signed": hmac.compare_digest(want, given),
                        "event": self.headers.get("X-FE-CI-Event"),
                        "delivery": self.headers.get("X-FE-CI-Delivery"),
                    }
                )
                status = outer.answers.pop(0) if outer.answers else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait(self, count: int, timeout: float = 30) -> list[dict[str, Any]]:
        eventually(
            lambda: list(self.got),
            until=lambda got: len(got) >= count,
            timeout=timeout,
            interval=0.05,
            message=f"{count} notifications",
        )
        return self.got


def notifying(tmp_path: Path, url: str, **extra: str) -> Service:
    data = tmp_path / "data"
    env = service_env(
        data,
        FE_CI_NOTIFY_URL=url,
        FE_CI_NOTIFY_SECRET=SECRET,
        FE_CI_NOTIFY_BACKOFF_S="0.05",
        FE_CI_SWEEP_INTERVAL_S="0.5",
        **extra,
    )
    return Service(data_dir=data, env=env).start()


def commit_build(svc: Service, runner: httpx.Client, sha: str, tmp: Path, *, red: bool) -> int:
    """A push of ``sha`` to develop, built and checked through the runner protocol: ``red``
    makes the probe's check fail."""
    build_id = int(send(svc, push(after=sha), delivery=f"d-{sha[:8]}").json()["build_id"])
    lease = runner.post("/api/jobs/claim", json={}).json()
    assert lease["kind"] == "build" and lease["build_id"] == build_id, lease
    token = lease["lease_token"]
    wheel = make_wheel(tmp / sha[:8], "1.32.0", "")
    with wheel.open("rb") as fh:
        headers = {"X-Lease-Token": token, "X-Python-Tag": "cp311"}
        up = runner.post(lease["artifact_url"], files={"wheel": (wheel.name, fh)}, headers=headers)
    assert up.status_code == 201, up.text
    _post_stages(runner, lease, red=False)
    lease = runner.post("/api/jobs/claim", json={}).json()
    assert lease["kind"] == "cpu" and lease["build_id"] == build_id, lease
    _post_stages(runner, lease, red=red)
    return build_id


def _post_stages(runner: httpx.Client, lease: dict[str, Any], *, red: bool) -> None:
    for name in lease["stages"]:
        status = "fail" if red and name == "probe" else "pass"
        result = {
            "name": name,
            "status": status,
            "checks": [{"name": f"{name}.ran", "status": status, "detail": "scripted"}],
        }
        body = {"lease_token": lease["lease_token"], "result": result}
        resp = runner.post(f"/api/jobs/{lease['job_id']}/stages", json=body)
        assert resp.status_code == 201, resp.text
    done = runner.post(
        f"/api/jobs/{lease['job_id']}/finish", json={"lease_token": lease["lease_token"]}
    )
    assert done.status_code == 200, done.text


def verdict(svc: Service, build_id: int) -> str:
    return str(loopback.get(f"{svc.url}/api/builds/{build_id}").json()["verdict"])


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def test_a_branch_that_turns_red_then_green_again_is_told_signed(
    tmp_path: Path, receiver: Receiver
) -> None:
    svc = notifying(tmp_path, receiver.url)
    try:
        runner = register(svc, "builder-1", builder="true")
        green = commit_build(svc, runner, "1" * 40, tmp_path, red=False)
        assert verdict(svc, green) == "pass"
        red = commit_build(svc, runner, "2" * 40, tmp_path, red=True)
        assert verdict(svc, red) == "fail"
        still_red = commit_build(svc, runner, "3" * 40, tmp_path, red=True)
        green_again = commit_build(svc, runner, "4" * 40, tmp_path, red=False)
        got = receiver.wait(2)
        time.sleep(1.5)  # three sweeps: nothing more may arrive (the first green, the second red)
    finally:
        svc.stop()
    assert [g["event"] for g in got] == ["branch_red", "branch_green"], got
    assert all(g["signed"] for g in got), got
    first, second = (g["body"] for g in got)
    assert first["build"]["id"] == red and first["previous"]["id"] == green
    assert first["build"]["commit"] == "2" * 40 and first["build"]["verdict"] == "fail"
    assert first["branch"] == "develop" and first["build"]["url"].endswith(f"/builds/{red}")
    assert "develop turned red" in first["text"]
    assert second["build"]["id"] == green_again and second["previous"]["id"] == still_red
    assert "green again" in second["text"]
    assert len({g["delivery"] for g in got}) == 2


def test_a_receiver_that_fails_twice_gets_it_on_the_third_attempt(tmp_path: Path) -> None:
    with Receiver(answers=[500, 503]) as receiver:
        svc = notifying(tmp_path, receiver.url, FE_CI_NOTIFY_FORMAT="slack")
        try:
            runner = register(svc, "builder-1", builder="true")
            commit_build(svc, runner, "1" * 40, tmp_path, red=False)
            commit_build(svc, runner, "2" * 40, tmp_path, red=True)
            got = receiver.wait(3)

            def rows() -> list[tuple[str, int, str]]:
                with svc.db() as conn:
                    return conn.execute(
                        "SELECT state, attempts, last_error FROM notifications"
                    ).fetchall()

            row = eventually(
                rows, until=lambda r: r and r[0][0] != "pending", message="the delivery's record"
            )
        finally:
            svc.stop()
    assert len(got) == 3 and all(g["signed"] for g in got), got
    assert len({json.dumps(g["body"], sort_keys=True) for g in got}) == 1  # the same body each time
    slack = got[0]["body"]
    assert set(slack) == {"text", "blocks"} and "develop turned red" in slack["text"]
    assert slack["blocks"][0]["text"]["type"] == "mrkdwn"
    assert row == [("sent", 3, "HTTP 503: ")], row


def test_a_notification_survives_a_restart_while_the_receiver_is_down(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    svc = notifying(tmp_path, url, FE_CI_NOTIFY_RETRIES="2")
    try:
        runner = register(svc, "builder-1", builder="true")
        commit_build(svc, runner, "1" * 40, tmp_path, red=False)
        commit_build(svc, runner, "2" * 40, tmp_path, red=True)

        def row_now() -> tuple[str, int] | None:
            with svc.db() as conn:
                return conn.execute("SELECT state, attempts FROM notifications").fetchone()

        row = eventually(  # refused by the closed port, kept for later
            row_now, until=lambda r: r and r[1] >= 2, message="two refused attempts"
        )
        assert row is not None and row[0] == "pending" and row[1] >= 2, row
    finally:
        svc.stop()
    with Receiver(port=port) as receiver:
        again = Service(data_dir=svc.data_dir, env=svc.env).start()
        try:
            got = receiver.wait(1)
        finally:
            again.stop()
    assert got[0]["event"] == "branch_red" and got[0]["signed"]
    with again.db() as conn:
        assert conn.execute("SELECT state FROM notifications").fetchall() == [("sent",)]
