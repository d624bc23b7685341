"""What several test modules do against a running service: register a runner, submit a wheel,
read a report, post a stage, deliver a signed GitHub push, wait for a build, open a browser.

Test modules import these from here, never from one another. The service, the wheels and the
free port they use are ``testkit``'s (shared with the benchmarks); the fixtures are in conftest.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

from testkit.registry import registry_wheel
from testkit.service import REGISTER, WEBHOOK, Service

Report = dict[str, Any]


def register(svc: Service, name: str, **labels: str) -> httpx.Client:
    """A registered runner's client, holding its own token."""
    resp = httpx.post(
        f"{svc.url}/api/runners/register",
        json={"name": name, "labels": labels},
        headers={"Authorization": f"Bearer {REGISTER}"},
    )
    assert resp.status_code == 200, resp.text
    return svc.http(resp.json()["token"])


def submit_wheel(svc: Service, wheel: Path | None = None) -> int:
    """POST /validate ``wheel`` (default: the registry's 1.32.0); the new build's id."""
    wheel = wheel or registry_wheel("1.32.0")
    with svc.http() as http, wheel.open("rb") as fh:
        resp = http.post("/validate", files={"wheel": (wheel.name, fh)})
    assert resp.status_code == 202, resp.text
    return int(resp.json()["build_id"])


def report(svc: Service, build_id: int) -> Report:
    return httpx.get(f"{svc.url}/api/builds/{build_id}").json()


def stage_body(token: str, name: str = "probe", status: str = "pass") -> dict:
    return {"lease_token": token, "result": {"name": name, "status": status, "reason": "r"}}


def wait_for(
    svc: Service, build_id: int, pred: Callable[[Report], bool], timeout: float = 240
) -> Report:
    """The build's report once ``pred`` holds for it (polled), else an AssertionError."""
    deadline = time.monotonic() + timeout
    r: Report = {}
    while time.monotonic() < deadline:
        r = report(svc, build_id)
        if pred(r):
            return r
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting on build {build_id}: {r}")


def processes_in(path: Path) -> list[int]:
    """The processes whose working directory is in ``path`` (a test's own tmp dir): a stage
    runs in its job's directory, so this finds a test's leftovers and not another's."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        if cwd == str(path) or cwd.startswith(f"{path}/"):
            found.append(int(proc.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ---------------------------------------------------------------- GitHub's webhook deliveries

AFTER = "a" * 40


def push(ref: str = "refs/heads/develop", after: str = AFTER, **extra: object) -> dict[str, object]:
    """A push event's payload as GitHub sends it (GitHub itself cannot be reached here)."""
    return {
        "ref": ref,
        "after": after,
        "before": "b" * 40,
        "deleted": False,
        "repository": {"clone_url": "https://evil.example/not-this.git"},
        "head_commit": {"id": after, "message": "Add <deterministic> knob"},
        "pusher": {"name": "dev"},
        **extra,
    }


def send(
    svc: Service,
    payload: object,
    *,
    event: str = "push",
    delivery: str = "d-1",
    form: bool = False,
    secret: str | None = WEBHOOK,
) -> httpx.Response:
    """Deliver ``payload`` signed with ``secret``, in either of GitHub's content types."""
    if form:
        body = urlencode({"payload": json.dumps(payload)}).encode()
        ctype = "application/x-www-form-urlencoded"
    else:
        body = json.dumps(payload).encode()
        ctype = "application/json"
    headers = {"Content-Type": ctype, "X-GitHub-Event": event, "X-GitHub-Delivery": delivery}
    if secret is not None:
        headers["X-Hub-Signature-256"] = (
            "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        )
    return httpx.post(f"{svc.url}/api/webhooks/github", content=body, headers=headers)


# Debian's Chromium: playwright cannot download its own browsers here.
CHROMIUM = Path(os.environ.get("FE_CI_CHROMIUM", "/usr/bin/chromium"))


@contextmanager
def chromium() -> Iterator[Any]:
    """A real headless Chromium (playwright's sync API), closed on the way out."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield browser
        finally:
            browser.close()
