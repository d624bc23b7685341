"""Stage logs: read by the runner from its work dir (bounded), posted with the stage, kept with the
service's secrets redacted, served as text and shown on the build page; against a real service
(uvicorn on 127.0.0.1) through the runner protocol. tests/functional/test_e2e.py sees a real
runner's."""

from __future__ import annotations

from pathlib import Path

from core.wire import LOG_MAX_CHARS, Environment, JobLease, Stage, StageResult, Status
from runner.agent.client import Client
from runner.agent.poster import post_stages
from runner.agent.state import KeptResult
from runner.pipeline.stage_results import stage_log
from testkit import loopback
from testkit.service import REGISTER, SUBMIT, Service
from testkit.wheels import make_wheel
from tests.helpers import register, submit_wheel


def test_the_runner_reads_the_end_of_each_stages_log(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "install-warm.log").write_text("warm layer\n")
    (logs / "install.log").write_text("Successfully installed nvidia-cudnn-frontend\n")
    (logs / "probe.log").write_bytes(b"x" * (3 * LOG_MAX_CHARS) + b"\nthe probe's last line\n")
    install = stage_log(tmp_path, Stage.install)
    assert install == "warm layer\nSuccessfully installed nvidia-cudnn-frontend\n"
    probe = stage_log(tmp_path, Stage.probe)
    assert probe is not None and len(probe) <= LOG_MAX_CHARS
    assert probe.startswith("[the first ") and probe.endswith("the probe's last line\n")
    assert stage_log(tmp_path, Stage.refusal) is None  # it wrote nothing
    assert stage_log(tmp_path, Stage.numerics) is None  # its output is determinism's


def test_a_stage_log_is_kept_redacted_and_served_as_text(service: Service, tmp_path: Path) -> None:
    build_id = submit_wheel(service, make_wheel(tmp_path / "w", "1.32.0", ""))
    runner = register(service, "ci-1")
    lease = runner.post("/api/jobs/claim", json={}).json()
    token, job = lease["lease_token"], lease["job_id"]
    too_long = {
        "lease_token": token,
        "result": {"name": "install", "status": "pass"},
        "log": "y" * (LOG_MAX_CHARS + 1),
    }
    refused = runner.post(f"/api/jobs/{job}/stages", json=too_long)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "validation_error"
    assert service.count("stage_logs") == 0 and service.count("stages") == 0
    log = (
        "Resolved 12 packages\n<b>not markup</b>\n"
        f"FE_CI_SUBMIT_TOKEN={SUBMIT} leaked by a candidate\n"
        f"registration {REGISTER}, lease {token}\n"
    )
    install = {"lease_token": token, "result": {"name": "install", "status": "pass"}, "log": log}
    assert runner.post(f"/api/jobs/{job}/stages", json=install).status_code == 201
    assert (
        runner.post(f"/api/jobs/{job}/stages", json={**install, "log": "again"}).status_code == 201
    )
    crash = {"name": "probe", "status": "crashed", "log_tail": f"Traceback: lease {token}"}
    probe = {"lease_token": token, "result": crash}
    assert runner.post(f"/api/jobs/{job}/stages", json=probe).status_code == 201

    text = loopback.get(f"{service.url}/api/builds/{build_id}/logs")
    assert text.status_code == 200 and text.headers["content-type"].startswith("text/plain")
    body = text.text
    assert f"==> cpu job {job} · install (pass) <==\nResolved 12 packages\n" in body
    assert f"==> cpu job {job} · probe (crashed) <==\n(only the failure tail was sent)\n" in body
    for secret in (SUBMIT, REGISTER, token):
        assert secret not in body
    assert body.count("[redacted]") == 4  # submit, registration, lease; the tail's lease
    assert "again" not in body  # a retried post keeps the first log
    only = loopback.get(f"{service.url}/api/builds/{build_id}/logs", params={"stage": "probe"}).text
    assert "install" not in only and "probe (crashed)" in only

    page = loopback.get(f"{service.url}/builds/{build_id}").text
    assert f'<details class="log" data-job="{job}" data-stage="install">' in page
    assert "&lt;b&gt;not markup&lt;/b&gt;" in page and "<b>not markup</b>" not in page
    assert SUBMIT not in page and "No log output recorded" not in page

    missing = loopback.get(f"{service.url}/api/builds/999/logs")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


def test_a_kept_result_posts_its_logs_after_an_outage(service: Service, tmp_path: Path) -> None:
    """A result kept on disk through an outage (runner/agent/state.py) still carries each stage's
    log: the runner's own client posts it, through the runner's own ``post_stages``."""
    build_id = submit_wheel(service, make_wheel(tmp_path / "w", "1.32.0", ""))
    runner = register(service, "ci-1")
    lease = JobLease.model_validate(runner.post("/api/jobs/claim", json={}).json())
    client = Client(service.url, token=runner.headers["authorization"].removeprefix("Bearer "))
    try:
        kept = KeptResult(
            lease=lease,
            stages=[StageResult(name=Stage.install, status=Status.pass_)],
            environment=Environment(),
            logs={Stage.install: "kept through the outage\n"},
        )
        again = KeptResult.model_validate_json(kept.model_dump_json())  # as read back from disk
        post_stages(client, again.lease, again.stages, [], again.logs)
    finally:
        client.close()
    text = loopback.get(f"{service.url}/api/builds/{build_id}/logs").text
    assert "install (pass) <==\nkept through the outage\n" in text
