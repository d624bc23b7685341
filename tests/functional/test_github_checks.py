"""Per-job commit statuses and check runs, against a local recorder of GitHub's API.

GitHub cannot be reached here, so ``tests/github_recorder.py`` stands in for it. The service is
real (uvicorn on 127.0.0.1, SQLite); the runners are driven through the real runner protocol, and
the GPU job's results are what an sm_90 runner would post (no GPU here; `tests/commit_build.py`).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from service.config import Settings
from service.outbound.github import StatusReporter
from service.outbound.statuses import CommitStatus
from testkit import loopback
from testkit.service import Service
from tests.commit_build import CONFIG, drive_commit_build
from tests.github_recorder import INSTALLATION_TOKEN, Call, GitHubRecorder
from tests.helpers import AFTER


def _by_context(calls: list[Call]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for c in calls:
        if "/statuses/" in c.path:
            out.setdefault(c.body["context"], []).append(c.body)
    return out


def test_statuses_per_job_show_sm_90_green_and_sm_100_pending(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    github = GitHubRecorder()
    svc: Service = make_service(
        FE_CI_GITHUB_TOKEN="gh-token-for-tests",
        FE_CI_GITHUB_API_URL=github.url,
        FE_CI_PUBLIC_URL="https://ci.example.org",
        FE_CI_GPU_ARCHS="sm_90,sm_100",
    )
    build_id = drive_commit_build(svc, tmp_path, "pass")

    def settled(calls: list[Call]) -> bool:
        ctx = _by_context(calls)
        return all(
            ctx.get(k, [{}])[-1].get("state") == "success" for k in ("fe-ci/sm_90", "fe-ci/probe")
        )

    contexts = _by_context(github.wait_until(settled))
    github.close()
    assert all("/statuses/" + AFTER in c.path for c in github.calls)
    assert set(contexts) == {
        "fe-ci/build",
        "fe-ci/probe",
        "fe-ci/sm_90",
        "fe-ci/sm_100",
        "fe-ci",
    }
    sm90 = contexts["fe-ci/sm_90"]
    # changes of state only, in order, none repeated; a state already superseded when its turn
    # came is not sent (the outbox posts a context's newest)
    every = [
        "waiting for the wheel",
        "waiting for an sm_90 runner",
        "running on gpu-1",
        # its refusal decisions are the CPU job's: pending until that job has made them
        "waiting for the refusal decisions of the cpu job (job 2)",
        "pass: everything applicable ran and passed",
    ]
    posted = [s["description"] for s in sm90]
    assert posted == sorted(set(posted), key=every.index), posted
    assert posted[-1] == every[-1]
    assert [s["state"] for s in sm90] == ["pending"] * (len(sm90) - 1) + ["success"]
    job_ids = [j["id"] for j in loopback.get(f"{svc.url}/api/builds/{build_id}").json()["jobs"]]
    assert sm90[-1]["target_url"].startswith(f"https://ci.example.org/builds/{build_id}#job-")
    assert int(sm90[-1]["target_url"].rsplit("-", 1)[1]) in job_ids
    # no sm_100 runner: that family alone stays pending, the build's verdict with it
    assert contexts["fe-ci/sm_100"][-1]["state"] == "pending"
    assert contexts["fe-ci/sm_100"][-1]["description"] == "waiting for an sm_100 runner"
    assert contexts["fe-ci/probe"][-1]["state"] == "success"
    assert contexts["fe-ci/build"][-1]["state"] == "success"
    assert contexts["fe-ci"][-1]["state"] == "pending"
    # the page anchors each job where the status links
    page = loopback.get(f"{svc.url}/builds/{build_id}").text
    assert f'id="job-{sm90[-1]["target_url"].rsplit("-", 1)[1]}"' in page


def _settled_summary(github: GitHubRecorder) -> dict[str, list[dict[str, Any]]]:
    def done(calls: list[Call]) -> bool:
        return _by_context(calls).get("fe-ci", [{}])[-1].get("state") not in (None, "pending")

    contexts = _by_context(github.wait_until(done))
    github.close()
    return contexts


def test_an_incomplete_build_is_no_success_and_a_gate_can_still_go_green(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """No sm_100 runner: the build is incomplete. By default (everything required) the ``fe-ci``
    context says ``error`` and what did not run; requiring probe, refusal and sm_90 it says
    ``success``, and the verdict in words beside it."""
    github = GitHubRecorder()
    env = {
        "FE_CI_GITHUB_TOKEN": "gh-token-for-tests",
        "FE_CI_GITHUB_API_URL": github.url,
        "FE_CI_GPU_ARCHS": "sm_90",
    }
    svc = make_service(**env)
    build_id = drive_commit_build(svc, tmp_path / "a", "pass", blackwell=True)
    contexts = _settled_summary(github)
    summary = contexts["fe-ci"][-1]
    assert summary["state"] == "error", summary
    assert "incomplete" in summary["description"]
    assert "grouped_gemm_dsrelu" in summary["description"]
    assert len(summary["description"]) <= 140
    assert contexts["fe-ci/sm_90"][-1]["state"] == "success"
    report = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
    assert report["verdict"] == "incomplete"
    assert report["gate"] == {
        "require": ["all"],
        "conclusion": "neutral",
        "reason": report["verdict_reason"],
    }

    github = GitHubRecorder()
    env["FE_CI_GITHUB_API_URL"] = github.url
    svc = make_service(**env, FE_CI_REQUIRE="probe,refusal,sm_90")
    build_id = drive_commit_build(svc, tmp_path / "b", "pass", blackwell=True)
    summary = _settled_summary(github)["fe-ci"][-1]
    assert summary["state"] == "success", summary  # sm_100 was not required
    assert summary["description"].startswith("required checks (probe,refusal,sm_90) passed")
    assert "incomplete" in summary["description"]
    report = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
    assert report["verdict"] == "incomplete"
    assert report["gate"]["conclusion"] == "success"
    assert report["gate"]["require"] == ["probe", "refusal", "sm_90"]


def _verify_jwt(token: str, public_key: rsa.RSAPublicKey) -> dict[str, Any]:
    def unb64(part: str) -> bytes:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))

    header, payload, signature = token.split(".")
    assert json.loads(unb64(header)) == {"alg": "RS256", "typ": "JWT"}
    public_key.verify(
        unb64(signature), f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256()
    )
    claims: dict[str, Any] = json.loads(unb64(payload))
    return claims


def test_an_app_posts_check_runs_with_the_failing_check_as_an_annotation(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    key, pem = _pem()
    github = GitHubRecorder()
    svc: Service = make_service(
        FE_CI_GITHUB_APP_ID="12345",
        FE_CI_GITHUB_APP_PRIVATE_KEY=pem,
        FE_CI_GITHUB_APP_INSTALLATION_ID="42",
        FE_CI_GITHUB_API_URL=github.url,
        FE_CI_PUBLIC_URL="https://ci.example.org",
        FE_CI_GPU_ARCHS="sm_90",
    )
    build_id = drive_commit_build(svc, tmp_path, "fail")

    def completed(calls: list[Call]) -> list[Call]:
        """Runs completed: updated, or created completed (the outbox sends a context's newest)."""
        return [c for c in calls if c.method != "GET" and c.body.get("status") == "completed"]

    calls = github.wait_until(lambda calls: len(completed(calls)) >= 4)  # build, gpu, cpu, verdict
    github.close()
    assert not [c for c in calls if "/statuses/" in c.path]  # an App posts check runs instead
    # the App's JWT, signed with its key, bought the installation token
    tokens = [c for c in calls if c.path == "/app/installations/42/access_tokens"]
    assert tokens and tokens[0].method == "POST"
    claims = _verify_jwt(
        tokens[0].headers["Authorization"].removeprefix("Bearer "), key.public_key()
    )
    assert claims["iss"] == "12345" and claims["exp"] - claims["iat"] <= 600
    runs = [c for c in calls if "/check-runs" in c.path]
    assert runs and all(c.headers["Authorization"] == f"Bearer {INSTALLATION_TOKEN}" for c in runs)
    created = {c.body["name"]: c for c in runs if c.method == "POST"}
    assert set(created) == {"fe-ci/build", "fe-ci/probe", "fe-ci/sm_90", "fe-ci"}
    sm90 = created["fe-ci/sm_90"]
    assert sm90.path == "/repos/NVIDIA/cudnn-frontend/check-runs"
    assert sm90.body["head_sha"] == AFTER
    # completed through the id GitHub gave the created run (or created completed)
    run_id = next(r["id"] for r in github.runs if r["name"] == "fe-ci/sm_90")
    done = [c for c in completed(calls) if c.path.endswith(f"/check-runs/{run_id}") or c is sm90]
    assert [c for c in runs if c.method == "POST" and c.body["name"] == "fe-ci/sm_90"] == [sm90]
    final = done[-1].body if done else {}
    assert final["conclusion"] == "failure", final
    output = final["output"]
    assert output["title"].startswith("fail: ")
    assert f"https://ci.example.org/builds/{build_id}#job-" in output["summary"]
    (note,) = output["annotations"]
    assert note["annotation_level"] == "failure" and "sdpa_bwd.deterministic" in note["title"]
    assert note["start_line"] == note["end_line"] == 1 and note["path"]
    assert "dq differed from run 0" in note["message"]
    assert (
        f"fe-ci validate nvidia_cudnn_frontend-1.32.0-py3-none-any.whl --stages determinism "
        f"--subjects sdpa_bwd --config {CONFIG}"
    ) in note["message"]
    assert "on an sm_90 machine" in note["message"]
    # the same line on the build page, in the JSON report and in the JUnit XML
    line = (
        f"fe-ci validate nvidia_cudnn_frontend-1.32.0-py3-none-any.whl --stages determinism "
        f"--subjects sdpa_bwd --config {CONFIG}"
    )
    report = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
    repros = [c.get("repro") for j in report["jobs"] for s in j["stages"] for c in s["checks"]]
    assert line in repros
    assert [r for r in repros if r] == [line]  # passing and skipped checks carry none
    assert line in loopback.get(f"{svc.url}/builds/{build_id}").text
    junit = loopback.get(f"{svc.url}/builds/{build_id}/junit.xml").text
    assert f"reproduce on an sm_90 machine: {line}" in junit
    verdict = [c for c in completed(calls) if c.body["output"]["title"].startswith("fail")]
    assert len(verdict) >= 2  # the job's run and the build's


def _pem() -> tuple[rsa.RSAPrivateKey, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return key, pem


def test_a_restarted_service_completes_the_check_run_it_created(tmp_path: Path) -> None:
    github = GitHubRecorder()
    _key, pem = _pem()
    settings = Settings(
        data_dir=tmp_path,
        github_api_url=github.url,
        github_app_id=7,
        github_app_private_key=pem.replace("\n", "\\n"),  # as an environment variable may carry it
        github_app_installation_id=42,
    )
    started = CommitStatus(
        build_id=3,
        commit=AFTER,
        context="fe-ci/sm_90",
        state="pending",
        description="running on gpu-1",
        target_url="https://ci.example.org/builds/3#job-9",
        phase="in_progress",
    )
    StatusReporter(settings).send(started)
    done = dataclasses.replace(
        started, state="success", description="pass: all", phase="completed", conclusion="success"
    )
    StatusReporter(settings).send(done)  # a new process: it knows no run ids
    github.close()
    runs = [c for c in github.calls if "/check-runs" in c.path and c.method != "GET"]
    assert [c.method for c in runs] == ["POST", "PATCH"]
    assert runs[1].path == f"/repos/NVIDIA/cudnn-frontend/check-runs/{github.runs[0]['id']}"
    assert runs[1].body["status"] == "completed"
