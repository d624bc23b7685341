"""Shared fixtures: a real service (``fe-ci serve`` under uvicorn on 127.0.0.1) in a temp dir."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
SUBMIT = "submit-token-for-tests"
REGISTER = "runner-token-for-tests"
WEBHOOK = "webhook-secret-for-tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    data_dir: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"service-{self.port}.log"

    def start(self) -> Service:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner.cli", "serve", "--port", str(self.port)],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/api/builds", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"service did not start: {self.log_path.read_text()[-3000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def http(self, token: str | None = SUBMIT) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.data_dir / "fe-ci.sqlite3")

    def count(self, table: str) -> int:
        with self.db() as conn:
            return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def runner_env(self, **extra: str) -> dict[str, str]:
        env = dict(self.env)
        env.update({"FE_CI_URL": self.url, "FE_CI_RUNNER_TOKEN": REGISTER}, **extra)
        return env


def base_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_")}
    env.update(
        {
            "FE_CI_DATA_DIR": str(data_dir),
            "FE_CI_SUBMIT_TOKEN": SUBMIT,
            "FE_CI_RUNNER_TOKEN": REGISTER,
            "FE_CI_WEBHOOK_SECRET": WEBHOOK,
            "FE_CI_GPU_ARCHS": "",
            "FE_CI_CACHE_DIR": str(data_dir.parent / "runner-cache"),
            "FE_CI_RUNNER_LABELS": "",
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(extra)
    return env


@pytest.fixture
def make_service(tmp_path: Path) -> Iterator[object]:
    """``make_service(**env)`` starts a real service; all are stopped at the end of the test."""
    started: list[Service] = []

    def _make(**extra: str) -> Service:
        data = tmp_path / f"data{len(started)}"
        svc = Service(data_dir=data, env=base_env(data, **extra)).start()
        started.append(svc)
        return svc

    yield _make
    for svc in started:
        svc.stop()


@pytest.fixture
def service(make_service: object) -> Service:
    return make_service()  # type: ignore[operator, no-any-return]
