"""The GitHub webhook against a real service. GitHub itself cannot be reached here: the tests
sign and send the deliveries GitHub would send, in both of its content types."""

from __future__ import annotations

import time

import httpx
import pytest

from testkit.service import Service
from tests.github_recorder import Call, GitHubRecorder
from tests.helpers import AFTER, push, register, send


def builds(svc: Service) -> list[dict]:
    return httpx.get(f"{svc.url}/api/builds").json()["items"]


@pytest.mark.parametrize("form", [False, True], ids=["json", "form"])
def test_signed_push_creates_one_build_and_redelivery_none(service: Service, form: bool) -> None:
    start = time.monotonic()
    resp = send(service, push(), form=form)
    assert time.monotonic() - start < 1.0
    assert resp.status_code == 200, resp.text
    build_id = resp.json()["build_id"]
    report = httpx.get(f"{service.url}/api/builds/{build_id}").json()
    assert report["source"] == "commit" and report["commit"] == AFTER
    assert report["branch"] == "develop"
    assert report["repo"] == "https://github.com/NVIDIA/cudnn-frontend.git"  # never the payload's
    assert [j["kind"] for j in report["jobs"]] == ["build", "cpu"]
    assert [j["status"] for j in report["jobs"]] == ["queued", "waiting"]
    assert send(service, push(), form=form).json()["build_id"] == build_id
    assert len(builds(service)) == 1


def test_wrong_or_missing_signature_is_refused_before_parsing(service: Service) -> None:
    assert send(service, push(), secret="wrong-secret-here").status_code == 401
    resp = send(service, push(), secret=None)
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "unauthorized"
    # a body that is not even JSON is refused for its signature, not parsed
    r = httpx.post(
        f"{service.url}/api/webhooks/github",
        content=b"{not json",
        headers={
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "x",
            "Content-Type": "application/json",
        },
    )
    assert r.status_code == 401
    assert builds(service) == []


def test_ping_answers_200(service: Service) -> None:
    resp = send(service, {"zen": "Keep it logically awesome."}, event="ping")
    assert resp.status_code == 200 and resp.json()["outcome"] == "pong"


@pytest.mark.parametrize(
    "payload",
    [
        push(after="0" * 40, deleted=True),
        push(ref="refs/tags/v1.28.0"),
        push(ref="refs/heads/feature-x"),
    ],
    ids=["deleted", "tag", "other-branch"],
)
def test_deletions_tags_and_other_refs_are_acknowledged_and_ignored(
    service: Service, payload: dict
) -> None:
    resp = send(service, payload)
    assert resp.status_code == 200 and resp.json()["outcome"].startswith("ignored")
    assert builds(service) == []


def test_other_events_get_a_2xx_and_are_ignored(service: Service) -> None:
    resp = send(service, {"action": "opened"}, event="issues")
    assert resp.status_code == 200 and resp.json()["build_id"] is None
    assert builds(service) == []


def test_bad_push_payload_is_a_clear_400(service: Service) -> None:
    resp = send(service, push(after="not-a-sha"), delivery="d-9")
    assert resp.status_code == 400 and "40-hex" in resp.json()["error"]["message"]
    assert builds(service) == []


def test_commit_statuses_go_to_the_configured_api(make_service) -> None:  # type: ignore[no-untyped-def]
    github = GitHubRecorder()
    svc: Service = make_service(
        FE_CI_GITHUB_TOKEN="gh-token-for-tests",
        FE_CI_GITHUB_API_URL=github.url,
        FE_CI_PUBLIC_URL="https://ci.example.org",
    )
    build_id = send(svc, push()).json()["build_id"]

    def build_status(calls: list[Call]) -> list[Call]:
        return [c for c in calls if c.body.get("context") == "fe-ci/determinism"]

    first, *_ = build_status(github.wait_until(lambda calls: build_status(calls)))
    assert first.path == f"/repos/NVIDIA/cudnn-frontend/statuses/{AFTER}"
    assert first.body["state"] == "pending"
    assert first.headers["Authorization"] == "Bearer gh-token-for-tests"
    assert first.body["target_url"] == f"https://ci.example.org/builds/{build_id}"
    # a builder fails to build it: the status follows the verdict (fail -> failure)
    builder = register(svc, "b", builder="1")
    lease = builder.post("/api/jobs/claim", json={}).json()
    assert lease["kind"] == "build" and lease["commit"] == AFTER
    token = lease["lease_token"]
    stage = {
        "name": "build",
        "status": "fail",
        "reason": "build_failed: pip wheel exited with status 1",
    }
    builder.post(
        f"/api/jobs/{lease['job_id']}/stages", json={"lease_token": token, "result": stage}
    )
    builder.post(f"/api/jobs/{lease['job_id']}/finish", json={"lease_token": token})
    calls = github.wait_until(lambda calls: len(build_status(calls)) >= 2)
    last = build_status(calls)[-1]
    assert last.body["state"] == "failure" and "build_failed" in last.body["description"]
    github.close()
