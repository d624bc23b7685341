"""What several test modules do against a running service: register a runner, submit a wheel,
read a report, post a stage, deliver a signed GitHub push, wait for a build, open a browser; and
the upload app the tests/functional/test_uploads_*.py modules post wheels to.

Test modules import these from here, never from one another. The service, the wheels and the
free port they use are ``testkit``'s (shared with the benchmarks); the fixtures are in conftest.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import select
import signal
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from service.errors import ApiError
from service.uploads import uploads, wheelcheck
from testkit import loopback, processes, wheels
from testkit.registry import registry_wheel
from testkit.service import REGISTER, WEBHOOK, Service, service_env
from testkit.waiting import eventually

Report = dict[str, Any]


def register(svc: Service, name: str, **labels: str) -> httpx.Client:
    """A registered runner's client, holding its own token."""
    resp = loopback.post(
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


def unfold(page: Any) -> None:
    """Open every folded section of a build's page, as a reader clicking through would."""
    page.eval_on_selector_all("details", "ds => ds.forEach(d => { d.open = true; })")


def report(svc: Service, build_id: int) -> Report:
    return loopback.get(f"{svc.url}/api/builds/{build_id}").json()


def stage_body(token: str, name: str = "probe", status: str = "pass") -> dict:
    return {"lease_token": token, "result": {"name": name, "status": status, "reason": "r"}}


def wait_for(
    svc: Service, build_id: int, pred: Callable[[Report], bool], timeout: float = 240
) -> Report:
    """The build's report once ``pred`` holds for it (polled), else an AssertionError."""
    return eventually(
        lambda: report(svc, build_id),
        until=pred,
        timeout=timeout,
        interval=0.3,
        message=f"build {build_id} ({getattr(pred, '__name__', 'a condition')})",
    )


def logged(path: Path, text: str) -> Callable[[], bool]:
    """A predicate for ``eventually``: ``text`` is in the log at ``path``."""

    def _logged() -> bool:
        return path.exists() and text in path.read_text()

    _logged.__name__ = f"{text!r} in {path.name}"
    return _logged


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


def processes_with(token: str) -> list[int]:
    """The live processes whose command line holds ``token`` (a test's own marker): a process in
    a pid namespace of its own has another pid there, but the same command line."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if token in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


def wait_gone(pids: Callable[[], list[int]], what: str, timeout: float = 5) -> None:
    """Until ``pids()`` finds none (``processes_with``, ``processes_in``): ``what`` has ended."""
    eventually(pids, until=lambda found: not found, timeout=timeout, interval=0.05,
               message=f"{what} to end")  # fmt: skip


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
    delivery: str | None = None,
    form: bool = False,
    secret: str | None = WEBHOOK,
) -> httpx.Response:
    """Deliver ``payload`` signed with ``secret``, in either of GitHub's content types, as a new
    delivery (a GUID, as GitHub's are) unless ``delivery`` names one."""
    delivery = delivery or str(uuid.uuid4())
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
    return loopback.post(f"{svc.url}/api/webhooks/github", content=body, headers=headers)


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


# ---------------------------------------------------------------- wheel uploads
# An app that calls ``uploads.receive_wheel`` and answers the one JSON error shape, served by a
# real uvicorn on 127.0.0.1 (the fixture ``upload_server`` is in conftest), and what the
# tests/functional/test_uploads_*.py modules post to it and assert about its answers.

WHEEL_NAME = wheels.wheel_name("1.32.0")
DIST_INFO = wheels.dist_info("1.32.0")
METADATA = wheels.metadata("1.32.0")
MiB = 1024 * 1024


def make_upload_app(data_dir: Path) -> FastAPI:
    app = FastAPI()

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        # Without "Connection: close" uvicorn would keep the connection alive and drain (read and
        # drop) the rest of a refused body; closing it is what makes the refusal stop the client.
        headers = {"Connection": "close"}
        return JSONResponse(exc.body(), status_code=exc.status_code, headers=headers)

    @app.post("/upload")
    async def upload(
        request: Request,
        max_bytes: int = 64 * MiB,
        max_unpacked: int = wheelcheck.MAX_UNPACKED_BYTES,
    ) -> dict[str, Any]:
        stored = await uploads.receive_wheel(
            request, data_dir=data_dir, max_bytes=max_bytes, max_unpacked_bytes=max_unpacked
        )
        return {**asdict(stored), "path": str(stored.path)}

    return app


class UploadServer:
    """``make_upload_app`` under uvicorn in a thread, on a free port of 127.0.0.1."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        config = uvicorn.Config(
            make_upload_app(data_dir), host="127.0.0.1", port=0, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> UploadServer:
        self.thread.start()
        eventually(lambda: self.server.started, timeout=10, interval=0.02, message="uvicorn")
        sock = self.server.servers[0].sockets[0]
        self.port = int(sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}/upload"
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def files_left(data_dir: Path) -> list[Path]:
    return sorted(p for p in data_dir.rglob("*") if not p.is_dir())


def wheel_with(
    extra: dict[str, bytes] | None = None,
    *,
    metadata: bytes | None = METADATA,
    wheel: bytes | None = wheels.WHEEL_FILE,
    dist_info: str = DIST_INFO,
) -> bytes:
    """A 1.32.0 frontend wheel's bytes, with METADATA or WHEEL left out (``None``) or changed."""
    members: dict[str, bytes] = {"cudnn/__init__.py": b"__version__ = '1.32.0'\n"}
    if metadata is not None:
        members[f"{dist_info}/METADATA"] = metadata
    if wheel is not None:
        members[f"{dist_info}/WHEEL"] = wheel
    members.update(extra or {})
    # a RECORD of the members, as a wheel builder writes it (none without a .dist-info at all)
    listed = metadata is not None or wheel is not None
    return wheels.wheel_bytes(members, record=dist_info if listed else None)


def post(
    server: UploadServer, content: bytes, filename: str = WHEEL_NAME, **params: int
) -> httpx.Response:
    files = {"wheel": (filename, content, "application/octet-stream")}
    return loopback.post(server.url, files=files, params=params, timeout=60)


def assert_refused(
    server: UploadServer, resp: httpx.Response, status: int, code: str, check: str | None = None
) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "detail"}
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    if check is not None:
        assert error["detail"]["check"] == check, error
    assert files_left(server.data_dir) == []
    return dict(error)


@contextmanager
def seeded_service(
    data: Path, more: Callable[[Any, dict[str, int]], None] | None = None, **seed: Any
) -> Iterator[tuple[Service, dict[str, int]]]:
    """A real service on ``data`` whose database holds the dashboard's scenarios
    (``testkit.dashboard_data.seed_all``, given ``seed``; ``more(engine, ids)`` adds to them):
    the service and the seeded ids by name."""
    from service.db import make_engine
    from testkit.dashboard_data import seed_all

    svc = Service(data_dir=data, env=service_env(data)).start()
    try:
        engine = make_engine(f"sqlite:///{data / 'fe-ci.sqlite3'}")
        try:
            ids = seed_all(engine, **seed)
            if more is not None:
                more(engine, ids)
        finally:
            engine.dispose()
        yield svc, ids
    finally:
        svc.stop()


def stop_process(proc: processes.Process, timeout: float = 60.0) -> int:
    """SIGTERM, then SIGKILL if it is still there after ``timeout`` seconds: its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def still_held(socks: list[socket.socket], reopen: Callable[[], socket.socket]) -> None:
    """Open again each of ``socks`` (requests stalled mid-body to hold the service's slots) that
    the service has answered or closed: one dispatched while a probe still held its slot was
    refused, and the slot it was to hold would stay free for every probe after."""
    for i, sock in enumerate(socks):
        if select.select([sock], [], [], 0)[0]:
            sock.close()
            socks[i] = reopen()


def layer_1_32(make_dir: Callable[[str], Path]) -> Any:
    """The 1.32.0 dependency layer, from the session's shared layers where there are (built
    once), else built in ``make_dir("layers")``."""
    from runner.envs import envs, warm_install
    from testkit.service import session_caches

    meta = envs.read_wheel_metadata(registry_wheel("1.32.0"))
    shared = session_caches().get("FE_CI_LAYERS_DIR")
    where = Path(shared) if shared else make_dir("layers")
    built = warm_install.ensure_layer(meta, layers_dir=where, timeout_s=900)
    assert built is not None
    return built
