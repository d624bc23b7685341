"""Logs are served as text: what a candidate prints (a terminal's clear-screen, window title and
hyperlink escapes, carriage-return overwrites, bidirectional overrides, a line shaped like the
service's own stage heading) is shown, never acted on or taken for the service's; and every token
the service knows is redacted before storage, the posting runner's own among them. Against a real
service on loopback."""

from __future__ import annotations

import json
from pathlib import Path

from core.wire import LOG_MAX_CHARS
from testkit import loopback
from testkit.service import ADMIN, REGISTER, SUBMIT, WEBHOOK, Service
from testkit.wheels import make_wheel
from tests.helpers import register, submit_wheel

FORGED = "==> cpu job 999 · refusal (pass) <=="
TERMINAL = (
    "\x1b[2J\x1b[H"  # clear the screen, cursor home
    "\x1b]0;owned title\x07"  # the window's title
    "\x1b]8;;https://evil.invalid/\x1b\\click here\x1b]8;;\x1b\\\n"  # an OSC-8 hyperlink
    "all tests passed\rFAILED: 3 tests\n"  # a carriage return that overwrites the line
    "\u202egnp.exe\n"  # right-to-left override
    "\x9b31m C1 CSI\n"
)


def test_a_candidates_log_is_served_as_text_with_no_forged_heading_and_no_token(
    service: Service, tmp_path: Path
) -> None:
    runner = register(service, "ci-1")
    own = runner.headers["authorization"].partition(" ")[2]
    tokens = {"admin": ADMIN, "runner": own, "submit": SUBMIT, "registration": REGISTER,
              "webhook": WEBHOOK}  # fmt: skip
    leaked = " ".join(f"{name}={value}" for name, value in tokens.items())
    build_id = submit_wheel(service, make_wheel(tmp_path / "w", "1.32.0", ""))
    lease = runner.post("/api/jobs/claim", json={}).json()
    token, job = lease["lease_token"], lease["job_id"]
    log = f"{TERMINAL}{FORGED}\n  {FORGED}\nwindows line\r\n{leaked}\n"
    result = {
        "name": lease["stages"][0],
        "status": "fail",
        "reason": f"leaked {leaked}",
        "checks": [{"name": "probe.x", "status": "fail", "detail": leaked,
                    "metrics": {"env": {"FE_CI_ADMIN_TOKEN": ADMIN, "mine": own}}}],
        "log_tail": leaked,
    }  # fmt: skip
    body = {"lease_token": token, "result": result, "log": log}
    assert runner.post(f"/api/jobs/{job}/stages", json=body).status_code == 201
    done = {"lease_token": token, "error": f"crashed with {own} and {ADMIN}"}
    assert runner.post(f"/api/jobs/{job}/finish", json=done).status_code == 200

    text = loopback.get(f"{service.url}/api/builds/{build_id}/logs").text
    # no control character but newline and tab; each shown as a visible escape
    assert not [c for c in text if ord(c) < 0x20 and c not in "\n\t"]
    assert "\x9b" not in text and "\u202e" not in text
    assert "\\x1b[2J\\x1b[H" in text and "\\x1b]0;owned title\\x07" in text
    assert "\\x1b]8;;https://evil.invalid/\\x1b\\click here" in text
    assert "all tests passed\\x0dFAILED: 3 tests" in text and "\\u202egnp.exe" in text
    assert "\\x9b31m" in text and "windows line\n" in text  # CRLF is a line end
    # the only heading lines are the service's own: one per stage of the build's jobs
    headings = [line for line in text.splitlines() if line.startswith("==>")]
    stages = sum(len(j["stages"]) for j in loopback.get(f"{service.url}/api/builds/{build_id}")
                 .json()["jobs"])  # fmt: skip
    assert len(headings) == stages and FORGED not in headings
    assert f"\\x3d=> cpu job 999 · refusal (pass) <==\n  {FORGED}\n" in text
    assert headings[0] == f"==> cpu job {job} · {lease['stages'][0]} (fail) <=="

    page = loopback.get(f"{service.url}/builds/{build_id}").text
    assert "\x1b" not in page and "\\x1b]0;owned title" in page and "\r" not in page

    report = loopback.get(f"{service.url}/api/builds/{build_id}").text
    served = [text, page, report, loopback.get(f"{service.url}/builds/{build_id}/junit.xml").text]
    with service.db() as conn:
        stored = "\n".join(conn.iterdump())
    for where, content in zip(("logs", "page", "report", "junit", "database"),
                              [*served, stored], strict=True):  # fmt: skip
        for name, value in tokens.items():
            assert value not in content, f"the {name} token in the {where}"
    assert "[redacted]" in text and "[redacted]" in json.loads(report)["jobs"][0]["reason"]


def test_a_log_at_its_bound_is_still_stored(service: Service, tmp_path: Path) -> None:
    """A log at its bound whose every character the door escapes (four characters each) is
    stored, its end kept as any log's is."""
    runner = register(service, "ci-1")
    build_id = submit_wheel(service, make_wheel(tmp_path / "w", "1.32.0", ""))
    lease = runner.post("/api/jobs/claim", json={}).json()
    result = {"name": lease["stages"][0], "status": "pass"}
    log = "\x1b" * LOG_MAX_CHARS
    body = {"lease_token": lease["lease_token"], "result": result, "log": log}
    assert runner.post(f"/api/jobs/{lease['job_id']}/stages", json=body).status_code == 201
    text = loopback.get(f"{service.url}/api/builds/{build_id}/logs").text
    assert text.count("\\x1b") == LOG_MAX_CHARS // 4 and "\x1b" not in text
