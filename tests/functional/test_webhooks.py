"""The GitHub webhook against a real service. GitHub itself cannot be reached here: the tests
sign and send the deliveries GitHub would send, in both of its content types."""

from __future__ import annotations

import hmac
import json
import socket
import time

import httpx
import pytest

from testkit import loopback
from testkit.service import SUBMIT, WEBHOOK, Service
from testkit.waiting import eventually
from tests.github_recorder import Call, GitHubRecorder
from tests.helpers import AFTER, push, register, send, still_held


def builds(svc: Service) -> list[dict]:
    return loopback.get(f"{svc.url}/api/builds").json()["items"]


@pytest.mark.parametrize("form", [False, True], ids=["json", "form"])
def test_signed_push_creates_one_build_and_redelivery_none(service: Service, form: bool) -> None:
    start = time.monotonic()
    resp = send(service, push(), form=form, delivery="d-1")
    assert time.monotonic() - start < 1.0
    assert resp.status_code == 200, resp.text
    build_id = resp.json()["build_id"]
    report = loopback.get(f"{service.url}/api/builds/{build_id}").json()
    assert report["source"] == "commit" and report["commit"] == AFTER
    assert report["branch"] == "develop"
    assert report["repo"] == "https://github.com/NVIDIA/cudnn-frontend.git"  # never the payload's
    assert [j["kind"] for j in report["jobs"]] == ["build", "cpu"]
    assert [j["status"] for j in report["jobs"]] == ["queued", "waiting"]
    assert send(service, push(), form=form, delivery="d-1").json()["build_id"] == build_id
    assert len(builds(service)) == 1


def test_wrong_or_missing_signature_is_refused_before_parsing(module_service: Service) -> None:
    before = module_service.count("builds")
    assert send(module_service, push(), secret="wrong-secret-here").status_code == 401
    resp = send(module_service, push(), secret=None)
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "unauthorized"
    # a body that is not even JSON is refused for its signature, not parsed
    r = loopback.post(
        f"{module_service.url}/api/webhooks/github",
        content=b"{not json",
        headers={
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "x",
            "Content-Type": "application/json",
        },
    )
    assert r.status_code == 401
    assert module_service.count("builds") == before


def test_ping_answers_200(module_service: Service) -> None:
    resp = send(module_service, {"zen": "Keep it logically awesome."}, event="ping")
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
    module_service: Service, payload: dict
) -> None:
    before = module_service.count("builds")
    resp = send(module_service, payload)
    assert resp.status_code == 200 and resp.json()["outcome"].startswith("ignored")
    assert module_service.count("builds") == before


def test_other_events_get_a_2xx_and_are_ignored(module_service: Service) -> None:
    before = module_service.count("builds")
    resp = send(module_service, {"action": "opened"}, event="issues")
    assert resp.status_code == 200 and resp.json()["build_id"] is None
    assert module_service.count("builds") == before


def test_bad_push_payload_is_a_clear_400(module_service: Service) -> None:
    before = module_service.count("builds")
    resp = send(module_service, push(after="not-a-sha"), delivery="d-9")
    assert resp.status_code == 400 and "40-hex" in resp.json()["error"]["message"]
    assert module_service.count("builds") == before


def test_commit_statuses_go_to_the_configured_api(make_service) -> None:  # type: ignore[no-untyped-def]
    github = GitHubRecorder()
    svc: Service = make_service(
        FE_CI_GITHUB_TOKEN="gh-token-for-tests",
        FE_CI_GITHUB_API_URL=github.url,
        FE_CI_PUBLIC_URL="https://ci.example.org",
    )
    build_id = send(svc, push()).json()["build_id"]

    def build_status(calls: list[Call]) -> list[Call]:
        return [c for c in calls if c.body.get("context") == "fe-ci"]

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


def test_a_replayed_push_adds_no_build_and_names_the_existing_one(service: Service) -> None:
    """The same signed body under new delivery ids: one build, and every answer names it."""
    first = send(service, push(), delivery="replay-1").json()
    assert first["outcome"].startswith("queued")
    for n in range(2, 5):
        again = send(service, push(), delivery=f"replay-{n}").json()
        assert again["build_id"] == first["build_id"], again
        assert (
            again["outcome"].startswith("already built")
            and str(first["build_id"]) in again["outcome"]
        )
    assert len(builds(service)) == 1
    # the same commit on another watched branch is another build; a cancelled build is rebuilt
    # when pushed again
    loopback.post(
        f"{service.url}/api/builds/{first['build_id']}/cancel",
        headers={"Authorization": f"Bearer {SUBMIT}"},
    ).raise_for_status()
    rebuilt = send(service, push(), delivery="replay-after-cancel").json()
    assert rebuilt["outcome"].startswith("queued") and rebuilt["build_id"] != first["build_id"]


def test_a_commit_id_with_a_trailing_newline_is_refused(module_service: Service) -> None:
    before = module_service.count("builds")
    resp = send(module_service, push(after=AFTER + "\n"), delivery="nl")
    assert resp.status_code == 400 and "40-hex" in resp.json()["error"]["message"]
    resp = loopback.post(
        f"{module_service.url}/validate",
        json={"commit": AFTER + "\n"},
        headers={"Authorization": f"Bearer {SUBMIT}"},
    )
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "bad_request"
    assert module_service.count("builds") == before


def deeply_nested(depth: int) -> str:
    return '{"ref": "refs/heads/develop", "x": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(push(head_commit="a string")),
        json.dumps(push(pusher=["a", "list"])),
        json.dumps(push(ref=["refs/heads/develop"])),
        json.dumps(push(deleted={"no": 1})),
        deeply_nested(100_000),
    ],
    ids=["head_commit-string", "pusher-list", "ref-list", "deleted-object", "nested-100000"],
)
def test_signed_payloads_of_the_wrong_shape_are_400_in_the_error_shape(
    module_service: Service, body: str
) -> None:
    before = module_service.count("builds")
    raw = body.encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": "shape",
        "X-Hub-Signature-256": "sha256=" + hmac.new(WEBHOOK.encode(), raw, "sha256").hexdigest(),
    }
    resp = loopback.post(f"{module_service.url}/api/webhooks/github", content=raw, headers=headers)
    assert resp.status_code == 400, resp.text
    assert set(resp.json()["error"]) == {"code", "message", "detail"}
    assert module_service.count("builds") == before
    assert "event=unhandled_error" not in module_service.log_path.read_text()


def test_delivery_ids_that_share_their_first_100_characters_do_not_collide(
    service: Service,
) -> None:
    """Was: ids cut to 100 characters, so the second delivery read as a duplicate of the first.
    Now an id longer than the column is refused (GitHub's are 36-character GUIDs)."""
    stem = "d" * 100
    resp = send(service, push(), delivery=stem + "-first")
    assert resp.status_code == 400 and "X-GitHub-Delivery" in resp.json()["error"]["message"]
    ok = send(service, push(), delivery=stem)
    other = send(service, push(after="c" * 40), delivery="d" * 99 + "e")
    assert ok.status_code == other.status_code == 200
    assert ok.json()["build_id"] != other.json()["build_id"]
    assert len(builds(service)) == 2


def test_an_unsigned_body_is_refused_unread_and_a_signed_one_is_bounded(make_service) -> None:  # type: ignore[no-untyped-def]
    """An unsigned request is answered before its body is read; a signed one past the limit
    is refused while it streams (413), whatever it declares."""
    svc: Service = make_service(FE_CI_WEBHOOK_MAX_KB="64")
    big = b"x" * (200 * 1024)
    url = f"{svc.url}/api/webhooks/github"
    with socket.create_connection(("127.0.0.1", svc.port), timeout=30) as sock:
        sock.sendall(
            b"POST /api/webhooks/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
            b"Content-Type: application/json\r\nContent-Length: 25000000\r\n\r\n{"
        )
        answer = sock.recv(4096)  # the body never comes: answered from the headers alone
    assert answer.startswith(b"HTTP/1.1 401"), answer
    headers = {"X-GitHub-Event": "push", "X-GitHub-Delivery": "u"}
    headers["X-Hub-Signature-256"] = "sha256=" + "0" * 64
    resp = loopback.post(url, content=big, headers=headers)
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "payload_too_large"
    resp = loopback.post(url, content=iter([big]), headers=headers)  # chunked: no Content-Length
    assert resp.status_code == 413
    assert builds(svc) == []


def webhook_head(signature: str, length: int) -> bytes:
    return (
        f"POST /api/webhooks/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
        f"X-GitHub-Delivery: held\r\nContent-Type: application/json\r\n"
        f"X-Hub-Signature-256: {signature}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


MALFORMED = [
    "sha256=00",
    "sha256=" + "0" * 63,
    "sha256=" + "0" * 65,
    "sha256=" + "g" * 64,
    "sha1=" + "0" * 40,
    "sha256:" + "0" * 64,
    "SHA256=" + "0" * 64,
    "sha256=" + "0" * 64 + ",sha256=" + "0" * 64,
]


def test_a_malformed_signature_is_refused_before_the_body_is_read(module_service: Service) -> None:
    """Was: any ``sha256=`` prefix let up to 1 MiB be read and held before the check. Now the
    header must be exactly ``sha256=`` and 64 hex digits; the answer comes from the headers
    alone, with 500 KB declared (within the limit) and one byte sent, and the connection is
    closed."""
    before = module_service.count("builds")
    for signature in MALFORMED:
        with socket.create_connection(("127.0.0.1", module_service.port), timeout=30) as sock:
            sock.sendall(webhook_head(signature, 500_000) + b"{")
            answer = bytearray()
            while chunk := sock.recv(65536):  # the service closes: nothing more is read
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 401"), (signature, bytes(answer[:300]))
        error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
        assert error["code"] == "unauthorized" and set(error) == {"code", "message", "detail"}
        assert "malformed X-Hub-Signature-256" in error["message"], signature
    assert module_service.count("builds") == before


def test_webhook_bodies_past_the_cap_get_503_and_pages_and_signed_pushes_go_on(
    make_service,  # type: ignore[no-untyped-def]
) -> None:
    """At most FE_CI_MAX_WEBHOOKS bodies are read at once (each holds up to 1 MiB): two
    deliveries that stall mid-body hold both slots, the next is refused at once with 503 and
    Retry-After, the health check and the dashboard answer meanwhile, and once the stalled
    ones go away a signed push is read, verified and builds."""
    svc: Service = make_service(FE_CI_MAX_WEBHOOKS="2")
    well_formed = "sha256=" + "0" * 64

    def hold() -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", svc.port), timeout=30)
        sock.sendall(webhook_head(well_formed, 500_000) + b'{"ref": "')
        return sock

    held = [hold() for _ in range(2)]

    def probe() -> httpx.Response:
        still_held(held, hold)  # one that met a probe in its slot was refused: again
        return send(svc, push(), delivery="probe", secret="not-the-secret")

    # until both stalled deliveries hold their slots, a badly signed probe is refused as such
    # (401) and builds nothing; once they do, it meets the limit first
    eventually(
        probe,
        until=lambda resp: resp.status_code == 503,
        timeout=10,
        interval=0.2,
        message="a third webhook body at once to be refused",
    )
    refused = send(svc, push(), delivery="third")
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert error["code"] == "too_many_webhooks" and error["detail"] == {"max_webhooks": 2}
    assert refused.headers["retry-after"] == "5"
    assert loopback.get(f"{svc.url}/healthz").status_code == 200
    assert loopback.get(f"{svc.url}/").status_code == 200
    assert builds(svc) == []
    for sock in held:
        sock.close()
    resp = eventually(  # the slots come back when the stalled deliveries end
        lambda: send(svc, push(), delivery="after"),
        until=lambda resp: resp.status_code != 503,
        timeout=10,
        interval=0.2,
        message="the webhook slots to be given back",
    )
    assert resp.status_code == 200 and resp.json()["outcome"].startswith("queued"), resp.text
    assert len(builds(svc)) == 1
