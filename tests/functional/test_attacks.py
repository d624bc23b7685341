"""Attacks on a real ``fe-ci serve`` on 127.0.0.1: a zip whose central directory is larger than its
end record says, slow and vanishing clients, too many uploads at once, runner bodies past their
limit, HEAD and page headers."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
from pathlib import Path

import httpx
import pytest

from service import body_limits
from service.uploads import wheelcheck
from testkit import loopback
from testkit.service import REGISTER, SUBMIT, Service
from testkit.waiting import eventually
from testkit.wheels import make_directory_bomb
from tests.helpers import CHROMIUM, chromium, register, still_held


def post_wheel(svc: Service, wheel: Path) -> httpx.Response:
    with svc.http() as http, wheel.open("rb") as fh:
        return http.post("/validate", files={"wheel": (wheel.name, fh)})


def blobs(svc: Service) -> list[Path]:
    return sorted((svc.data_dir / "blobs").rglob("*.whl"))


def stored(svc: Service) -> tuple[int, int]:
    """The builds and the stored wheels: a refused upload adds to neither."""
    return svc.count("builds"), len(blobs(svc))


def assert_refused(resp: httpx.Response, status: int, code: str, check: str) -> str:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"code", "message", "detail"}
    assert error["code"] == code and error["detail"]["check"] == check, error
    return str(error["message"])


# ---------------------------------------------------------------- the central directory


def test_a_directory_with_more_entries_than_its_end_record_says_is_refused(
    module_service: Service, tmp_path: Path
) -> None:
    """Was accepted (202): the cap read the end record's count, ``zipfile`` then walked all."""
    svc, before = module_service, stored(module_service)
    wheel = make_directory_bomb(tmp_path, members=1_000, declared=100)
    message = assert_refused(post_wheel(svc, wheel), 422, "unsafe_wheel", "member_count")
    assert "the end record says 100" in message
    assert stored(svc) == before


def test_a_directory_past_its_byte_bound_is_refused_before_it_is_walked(
    module_service: Service, tmp_path: Path
) -> None:
    """The 2,000,000-member attack in small: the directory's size alone refuses it."""
    svc, before = module_service, stored(module_service)
    members = wheelcheck.MAX_DIRECTORY_BYTES // (46 + 13) + 1_000
    wheel = make_directory_bomb(tmp_path, members=members, declared=100)
    message = assert_refused(post_wheel(svc, wheel), 422, "unsafe_wheel", "directory_size")
    assert f"at most {wheelcheck.MAX_DIRECTORY_BYTES}" in message
    assert stored(svc) == before


def test_an_honest_hand_written_directory_is_accepted(
    module_service: Service, tmp_path: Path
) -> None:
    """The builder above makes valid wheels when it does not lie: the refusals are the lie's."""
    builds, wheels = stored(module_service)
    wheel = make_directory_bomb(tmp_path, members=1_000, declared=1_003, record=True)
    resp = post_wheel(module_service, wheel)
    assert resp.status_code == 202, resp.text
    assert stored(module_service) == (builds + 1, wheels + 1)


# ---------------------------------------------------------------- slow and vanishing clients


def raw(svc: Service, head: bytes, body: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", svc.port), timeout=30)
    sock.sendall(head + body)
    return sock


def upload_head(length: int, boundary: str = "b0undary") -> bytes:
    return (
        f"POST /validate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {SUBMIT}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def webhook_head(length: int, signature: str = "sha256=" + "0" * 64) -> bytes:
    """A delivery's head with a well-formed signature (a wrong one: the body decides that)."""
    return (
        f"POST /api/webhooks/github HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: {signature}\r\n"
        f"X-GitHub-Event: push\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


UPLOAD_START = (
    b"--b0undary\r\nContent-Disposition: form-data; name=wheel; "
    b'filename="nvidia_cudnn_frontend-1.32.0-py3-none-any.whl"\r\n\r\nPK\x03\x04'
)


def read_all(sock: socket.socket) -> bytes:
    """Everything the service sends until it closes the connection (30 s at most). A service that
    closes while part of a request is still unread resets the connection after its answer: what
    arrived before the reset is the answer."""
    out = bytearray()
    with sock, contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            out += chunk
    return bytes(out)


def test_a_client_that_never_finishes_its_request_head_is_disconnected(make_service) -> None:  # type: ignore[no-untyped-def]
    """Was held open for ever: nothing sent after connecting, or a head trickled a byte at a
    time. Now the connection is closed once the head is later than FE_CI_HEADER_TIMEOUT_S."""
    svc: Service = make_service(FE_CI_HEADER_TIMEOUT_S="1")
    silent = socket.create_connection(("127.0.0.1", svc.port), timeout=30)
    assert read_all(silent) == b""
    trickle = raw(svc, b"GET /healthz HTTP/1.1\r\n")
    closed = False
    for _ in range(100):  # one byte each 0.2 s: 20 s, far past the 1 s limit
        try:
            trickle.sendall(b"X")
            time.sleep(0.2)
        except OSError:
            closed = True
            break
    trickle.close()
    assert closed, "a trickled request head kept its connection for 20 s"
    assert loopback.get(f"{svc.url}/healthz").status_code == 200  # prompt clients are unaffected


def test_a_body_that_stops_arriving_is_a_408_and_leaves_nothing(make_service) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_BODY_TIMEOUT_S="1")
    answer = read_all(raw(svc, upload_head(10_000_000), UPLOAD_START + b"\0" * 4096))
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b'"code":"request_timeout"' in answer
    assert read_all(raw(svc, webhook_head(1000), b"{")).startswith(b"HTTP/1.1 408")
    assert [p for p in svc.data_dir.rglob("*.part")] == []
    assert svc.count("builds") == 0


def trickle(svc: Service, start: bytes, limit_s: float = 60.0) -> tuple[bytes, list[int]]:
    """Send ``start``, then 8 bytes every 0.25 s (32 bytes/s) until the service answers or
    closes (``limit_s`` at most), asking ``/healthz`` at every step; (the answer, the health
    checks' statuses)."""
    sock = raw(svc, start)
    health: list[int] = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        readable, _, _ = select.select([sock], [], [], 0.25)
        if readable:
            break
        health.append(loopback.get(f"{svc.url}/healthz", timeout=30).status_code)
        try:
            sock.sendall(b"0" * 8)
        except OSError:
            break
    return read_all(sock), health


SLOW = {
    "upload": upload_head(10_000_000) + UPLOAD_START,
    "webhook": webhook_head(500_000) + b'{"ref": "',
    "runner-json": (
        f"POST /api/runners/register HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {REGISTER}\r\n"
        "Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
        '{"name": "'
    ).encode(),
}


@pytest.mark.parametrize("kind", sorted(SLOW))
def test_a_slow_body_is_cut_at_its_deadline_while_healthz_answers(make_service, kind: str) -> None:  # type: ignore[no-untyped-def]
    """Was held for minutes: a few bytes every quarter second never tripped the pause between
    chunks. Now a body must keep FE_CI_BODY_MIN_RATE_KB after FE_CI_BODY_DEADLINE_S (here
    1 KiB/s after 2 s), and the service answers its health check meanwhile. The runner route's
    body is read by FastAPI, which would make the cut a 400: it stays a 408."""
    svc: Service = make_service(FE_CI_BODY_DEADLINE_S="2", FE_CI_BODY_MIN_RATE_KB="1")
    answer, health = trickle(svc, SLOW[kind])
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "request_timeout" and "slower than 1 KiB/s" in error["message"]
    assert error["detail"]["min_rate_kib_s"] == 1.0
    if kind == "upload":  # the whole deadline scales with the size the upload declares
        assert error["detail"]["deadline_s"] == round(2 + 10_000_000 / 1024, 1)
    assert health and set(health) == {200}, health
    assert [p for p in svc.data_dir.rglob("*.part")] == []
    assert svc.count("builds") == 0 and svc.count("runners") == 0


def test_uploads_past_the_limit_answer_503_in_the_error_shape(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_MAX_UPLOADS="2", FE_CI_BODY_TIMEOUT_S="60")
    wheel = make_directory_bomb(tmp_path, members=10, declared=13, record=True)

    def hold() -> socket.socket:
        return raw(svc, upload_head(10_000_000), UPLOAD_START)

    held = [hold() for _ in range(2)]

    def probe() -> httpx.Response:
        still_held(held, hold)  # one that met a probe in its slot was refused: again
        return post_wheel(svc, wheel)

    refused = eventually(  # once both held uploads have taken their slots
        probe,
        until=lambda resp: resp.status_code == 503,
        timeout=10,
        interval=0.2,
        message="a third upload at once to be refused",
    )
    error = refused.json()["error"]
    assert error["code"] == "too_many_uploads" and error["detail"] == {"max_uploads": 2}
    assert refused.headers["retry-after"] == "5"
    # throttled uploads leave the health check and the dashboard answering
    assert loopback.get(f"{svc.url}/healthz").status_code == 200
    assert loopback.get(f"{svc.url}/").status_code == 200
    for sock in held:
        sock.close()
    eventually(  # the slots come back when the held uploads end
        lambda: post_wheel(svc, wheel),
        until=lambda resp: resp.status_code == 202,
        timeout=10,
        interval=0.2,
        message="the upload slots to be given back",
    )


def test_a_client_that_goes_away_mid_body_leaves_no_error_in_the_log(service: Service) -> None:
    """Was an ERROR with a traceback (``event=unhandled_error``) for a webhook or JSON body cut
    short; a client going away is not the service's error."""
    heads = [
        webhook_head(1000) + b"{",
        f"POST /validate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {SUBMIT}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode(),
        upload_head(10_000_000) + UPLOAD_START,
    ]
    for head in heads:
        raw(service, head).close()
    log = eventually(
        service.log_path.read_text,
        until=lambda log: log.count("event=client_gone") >= 2 and "code=incomplete_upload" in log,
        timeout=30,
        message="the three clients' departures in the log",
    )
    assert log.count("event=client_gone") >= 2, log[-3000:]
    assert "Traceback" not in log and "unhandled_error" not in log, log[-3000:]
    assert service.count("builds") == 0


# ---------------------------------------------------------------- runner bodies past their limit


def runner_head(path: str, extra: str, token: str = "not-a-runner") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\n{extra}\r\n"
    ).encode()


def answer_of(data: bytes) -> tuple[int, dict]:
    head, _, body = data.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        size, _, rest = body.partition(b"\r\n")
        body = rest[: int(size, 16)]
    return int(head.split()[1]), json.loads(body)


def test_a_runner_body_past_its_limit_is_a_413_before_it_is_read(service: Service) -> None:
    """Was: a 150 MB stage post was read whole (RSS 146 -> 600 MB) before anything looked at it;
    an 8 MB runner label registered. A declared length past the route's limit is refused before
    a byte of the body arrives; a chunked body as soon as it passes the limit."""
    over = body_limits.REPORT_BYTES + 1
    cases = [
        ("/api/jobs/1/stages", f"Content-Length: {over}\r\n"),
        ("/api/jobs/1/finish", f"Content-Length: {150 << 20}\r\n"),
        ("/api/runners/register", f"Content-Length: {8 << 20}\r\n"),
        ("/api/jobs/1/heartbeat", f"Content-Length: {body_limits.SMALL_BYTES + 1}\r\n"),
    ]
    documented = loopback.get(f"{service.url}/openapi.json").json()["paths"]
    for path, length in cases:
        status, body = answer_of(read_all(raw(service, runner_head(path, length), b"{")))
        assert status == 413, (path, body)
        assert "413" in documented[path.replace("/1/", "/{job_id}/")]["post"]["responses"]
        assert body["error"]["code"] == "payload_too_large", body
        assert set(body["error"]["detail"]) == {"limit_bytes"}
    # chunked: no length to refuse up front; the service stops at the limit, not at the end
    # (with a runner's own token: a wrong one is refused before a byte of the body is read)
    with register(service, "chunked") as runner:
        token = str(runner.headers["authorization"]).split()[1]
    sock = raw(service, runner_head("/api/jobs/1/stages", "Transfer-Encoding: chunked\r\n", token))
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
    sent = 0
    try:
        for _ in range(64):  # 64 MiB at most; refused after 8
            sock.sendall(chunk)
            sent += 1
    except OSError:
        pass  # closed on us: the answer is already waiting
    status, body = answer_of(read_all(sock))
    assert status == 413 and body["error"]["code"] == "payload_too_large", body
    assert sent < 64
    assert service.count("runners") == 1 and service.count("stages") == 0
    assert loopback.get(f"{service.url}/healthz").status_code == 200


# ---------------------------------------------------------------- HEAD and page headers

PAGES = ["/", "/trends", "/runners", "/builds/1", "/compare?a=1&b=1"]
OTHERS = [
    "/healthz",
    "/api/builds",
    "/api/builds/1",
    "/api/bisections",
    "/api/bisections/1",
    "/api/pins",
    "/builds/1/live.json",
    "/builds/1/junit.xml",
    "/api/builds/1/logs",
    "/api/builds/1/wheel",
    "/badge/develop.svg",
    "/api/jobs/1/wheel",
    "/openapi.json",
    "/static/live.js",
    "/static/controls.js",
    "/static/style.css",
    "/docs",
]


def test_head_answers_like_get_without_a_body_on_every_get_route(
    service: Service, tmp_path: Path
) -> None:
    """Was 405 on every GET route, /healthz included (load balancers use HEAD)."""
    wheel = make_directory_bomb(tmp_path, members=3, declared=6, record=True)
    assert post_wheel(service, wheel).status_code == 202
    schema = loopback.get(f"{service.url}/openapi.json").json()
    gets = {
        p.replace("{build_id}", "1").replace("{job_id}", "1").replace("{bisection_id}", "1")
        for p, ops in schema["paths"].items()
        if "get" in ops
    }
    assert gets <= set(PAGES + OTHERS) | {"/builds/1/events"}, gets - set(PAGES + OTHERS)
    for path in PAGES + OTHERS:
        get = loopback.get(f"{service.url}{path}")
        head = loopback.head(f"{service.url}{path}")
        assert head.status_code == get.status_code, (path, head.status_code, get.status_code)
        assert head.headers.get("content-type") == get.headers.get("content-type"), path
        assert head.content == b"", path
    head = loopback.head(f"{service.url}/builds/1/events", timeout=30)
    assert head.status_code == 200 and head.headers["content-type"].startswith("text/event-stream")
    assert loopback.head(f"{service.url}/healthz").status_code == 200


def test_pages_carry_nosniff_deny_and_a_policy_and_the_dashboard_still_runs(
    service: Service, tmp_path: Path
) -> None:
    wheel = make_directory_bomb(tmp_path, members=3, declared=6, record=True)
    build_id = post_wheel(service, wheel).json()["build_id"]
    for path in PAGES:
        headers = loopback.get(f"{service.url}{path}").headers
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["x-frame-options"] == "DENY", path
        assert "default-src 'self'" in headers["content-security-policy"], path
        assert "script-src 'self'" in headers["content-security-policy"], path
    assert loopback.get(f"{service.url}/api/builds").headers["x-content-type-options"] == "nosniff"
    if not CHROMIUM.exists():
        return  # the headers are checked; the browser half needs Debian's chromium
    with chromium() as browser:
        page = browser.new_page()
        console: list[str] = []
        page.on("console", lambda msg: console.append(msg.text))
        page.goto(f"{service.url}/builds/{build_id}")
        page.wait_for_timeout(500)
        with service.http() as http:
            http.post(f"/api/builds/{build_id}/cancel").raise_for_status()
        # only live.js, following the build's event stream, can show the cancel without a reload
        # (the progress section folds once the build has ended: attached, not visible)
        page.locator("#live [data-state=cancelled]").first.wait_for(
            state="attached", timeout=15_000
        )
        page.goto(f"{service.url}/trends")
        page.goto(f"{service.url}/")
        browser.close()
    refused = [m for m in console if "Content Security Policy" in m or "Refused to" in m]
    assert refused == [], refused
