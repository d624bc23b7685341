"""Characters Postgres text or XML 1.0 refuse, sent by a runner (most of what it sends is the
candidate's), are replaced at the protocol's door (``core/bounds.py``): stored and served on
SQLite and on a real PostgreSQL alike, never a 500 that the runner would retry until its lease ran
out. PostgreSQL is ``tests/postgres.py``'s, skipped only where its binaries are absent."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit import loopback
from testkit.service import Service
from testkit.wheels import make_wheel
from tests.helpers import register, submit_wheel
from tests.postgres import postgres_server, postgres_url  # noqa: F401 - fixtures

# NUL, other C0 controls, lone surrogates and the two non-characters; tab, newline and CR stay
BAD = "nul\x00 bel\x07 vt\x0b us\x1f hi\ud800 lo\udfff fffe\ufffe ffff\uffff"
CLEAN = "nul\ufffd bel\ufffd vt\ufffd us\ufffd hi\ufffd lo\ufffd fffe\ufffd ffff\ufffd"
KEPT = "\ttab\r\nline"


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite3'}"
    return str(request.getfixturevalue("postgres_url"))


def send(runner: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    """``body`` as JSON with ``\\u`` escapes, as a runner's encoder sends a lone surrogate."""
    data = json.dumps(body, ensure_ascii=True).encode()
    return runner.post(path, content=data, headers={"Content-Type": "application/json"})


def test_unstorable_characters_are_replaced_at_the_door(
    make_service: Callable[..., Service], database: str, tmp_path: Path
) -> None:
    svc = make_service(FE_CI_DATABASE_URL=database)
    runner = register(svc, "ci-1")
    build_id = submit_wheel(svc, make_wheel(tmp_path / "w", "1.32.0", ""))
    lease = runner.post("/api/jobs/claim", json={}).json()
    token, job = lease["lease_token"], lease["job_id"]
    result = {
        "name": lease["stages"][0],
        "status": "fail",
        "reason": BAD + KEPT,
        "checks": [
            {
                "name": "probe.import" + BAD[:4],
                "status": "fail",
                "detail": BAD,
                "metrics": {"note" + BAD[:4]: [BAD, {"deeper": BAD}]},
            }
        ],
        "findings": [{"kind": "import_error", "severity": "error", "message": BAD}],
    }
    posted = send(runner, f"/api/jobs/{job}/stages", {"lease_token": token, "result": result,
                                                       "log": BAD + KEPT})  # fmt: skip
    assert posted.status_code == 201, posted.text
    done = send(runner, f"/api/jobs/{job}/finish", {"lease_token": token, "error": BAD})
    assert done.status_code == 200, done.text

    report = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
    (job_report,) = [j for j in report["jobs"] if j["id"] == job]
    (stage,) = job_report["stages"]
    assert stage["reason"] == CLEAN + KEPT
    (check,) = stage["checks"]
    assert check["name"] == "probe.import" + CLEAN[:4] and check["detail"] == CLEAN
    assert check["metrics"] == {"note" + CLEAN[:4]: [CLEAN, {"deeper": CLEAN}]}
    assert CLEAN in json.dumps(report["findings"], ensure_ascii=False)
    logs = loopback.get(f"{svc.url}/api/builds/{build_id}/logs")
    # a log keeps its controls legible: visible escapes rather than U+FFFD
    assert logs.status_code == 200 and "\x00" not in logs.text
    assert "nul\\x00 bel\\x07 vt\\x0b us\\x1f hi\ufffd lo\ufffd fffe\ufffd" in logs.text
    junit = loopback.get(f"{svc.url}/builds/{build_id}/junit.xml")
    assert junit.status_code == 200
    ET.fromstring(junit.content)  # well formed
    page = loopback.get(f"{svc.url}/builds/{build_id}")
    assert page.status_code == 200 and "\x00" not in page.text


def test_a_nul_in_a_log_or_a_reason_is_stored_not_a_server_error(
    make_service: Callable[..., Service], database: str, tmp_path: Path
) -> None:
    """The attack as it was found: valid UTF-8, a NUL in the log and the reason (Postgres: 500
    ``DataError``, retried by the runner until its lease expired)."""
    svc = make_service(FE_CI_DATABASE_URL=database)
    runner = register(svc, "ci-1")
    build_id = submit_wheel(svc, make_wheel(tmp_path / "w", "1.32.0", ""))
    lease = runner.post("/api/jobs/claim", json={}).json()
    result = {"name": lease["stages"][0], "status": "fail", "reason": "a\x00b"}
    body = {"lease_token": lease["lease_token"], "result": result, "log": "x\x00y\n"}
    posted = runner.post(f"/api/jobs/{lease['job_id']}/stages", json=body)
    assert posted.status_code == 201, posted.text
    (job,) = [j for j in loopback.get(f"{svc.url}/api/builds/{build_id}").json()["jobs"]
              if j["id"] == lease["job_id"]]  # fmt: skip
    assert job["stages"][0]["reason"] == "a\ufffdb"
    assert "x\\x00y" in loopback.get(f"{svc.url}/api/builds/{build_id}/logs").text
