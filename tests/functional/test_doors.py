"""The service's doors on a real ``fe-ci serve`` on 127.0.0.1: every route that takes a token
checks it before it reads a byte of the body, and every route has a body limit.

Both walk the app's own routes, so a route added later is covered as soon as it exists.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from service import body_limits, doors
from service.app import create_app
from service.config import Settings
from testkit.service import ADMIN, REGISTER, SUBMIT, Service
from tests.helpers import register

ANSWER_S = 5.0  # well under the body timeout (30 s): a route that waits for the body misses it


def app_routes(tmp_path: Path) -> list[Any]:
    settings = Settings(
        data_dir=tmp_path / "walk", submit_token=SUBMIT, runner_token=REGISTER, admin_token=ADMIN
    )
    return doors.routes_in_order(create_app(settings))


def concrete(path_format: str) -> str:
    """A path the route matches: 1 for every id, a plain name for every other parameter."""
    return re.sub(r"\{(\w+)\}", lambda m: "1" if m.group(1).endswith("id") else "x", path_format)


def ask(svc: Service, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send ``head`` and the start of a body, and read the answer (a refusal closes the
    connection) within ``ANSWER_S``."""
    with socket.create_connection(("127.0.0.1", svc.port), timeout=ANSWER_S) as sock:
        sock.sendall(head + body)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except TimeoutError:
            pytest.fail(f"no answer within {ANSWER_S} s to {head.splitlines()[0]!r}: {data!r}")
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest


def code_of(rest: bytes) -> str:
    return str(json.loads(rest.partition(b"\r\n\r\n")[2])["error"]["code"])


def head(method: str, path: str, token: str, length: int) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_every_route_that_takes_a_token_refuses_a_wrong_one_before_reading_the_body(
    service: Service, tmp_path: Path
) -> None:
    """Was: ``POST /api/pins/...`` read and parsed the whole body before the admin check (four
    10 MB bodies: 104 -> 1,177 MB of RSS, then 401). Each guarded route gets a wrong token and
    a body announced but not sent: the 401 comes at once, not when the body would be complete."""
    guarded = [(r, d) for r, d in ((r, doors.door_of(r)) for r in app_routes(tmp_path)) if d]
    paths = {concrete(r.path_format) for r, _ in guarded}
    assert {"/api/pins/x/x", "/api/builds/1/rerun", "/api/jobs/1/stages", "/validate"} <= paths
    for route, _door in guarded:
        for method in route.methods:
            wrong = head(method, concrete(route.path_format), "not-a-token-at-all", 60_000)
            status, rest = ask(service, wrong, b"{")
            assert status == 401, (method, route.path_format, rest[-300:])
            assert code_of(rest) == "unauthorized", rest[-300:]
            assert b"connection: close" in rest.lower(), rest[:300]
    assert service.count("builds") == 0 and service.count("comparison_pins") == 0


def _tokens(svc: Service) -> dict[Any, str]:
    runner = register(svc, "doors-runner")
    own = str(runner.headers["authorization"]).split()[1]
    runner.close()
    return {
        doors.deps.require_submitter: SUBMIT,
        doors.deps.require_registration: REGISTER,
        doors.deps.require_admin: ADMIN,
        doors.deps.require_runner: own,
    }


def test_every_route_has_a_body_limit(service: Service, tmp_path: Path) -> None:
    """Was: only the runner's routes had one; a re-pin, a rerun or a page read any body. Every
    route, with the token it takes, refuses a body announced past its limit before reading it,
    except the few that read theirs under their own limit (uploads, commits, webhooks)."""
    tokens = _tokens(service)
    seen, own = 0, set()
    for route in app_routes(tmp_path):
        path_format = getattr(route, "path_format", None)
        if not path_format or not getattr(route, "methods", None):
            continue
        path = concrete(path_format)
        limit = body_limits.limit_for(path)
        if limit is None:
            own.add(path)
            continue
        door = doors.door_of(route)
        token = tokens[door] if door else "none"
        for method in route.methods - {"HEAD"}:
            status, rest = ask(service, head(method, path, token, limit + 1), b"{")
            assert status == 413, (method, path, rest[-300:])
            assert code_of(rest) == "payload_too_large", rest[-300:]
            seen += 1
    assert own == {"/validate", "/api/webhooks/github", "/api/jobs/1/artifact"}
    assert seen > 30
    assert service.count("builds") == 0
