"""A real ``fe-ci serve`` (uvicorn on 127.0.0.1) over a data dir of its own, and its runners."""

from __future__ import annotations

import errno
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from testkit import loopback, processes
from testkit.waiting import eventually

ROOT = Path(__file__).resolve().parent.parent
SUBMIT = "submit-token-for-tests"
REGISTER = "runner-token-for-tests"
WEBHOOK = "webhook-secret-for-tests"
ADMIN = "admin-token-for-tests"


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (``Service.start`` retries if it is not)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# What every runner of one test session shares, as runners of one host may: the dependency layers
# (runner/envs/layers.py) and the compile cache (runner/cache/compile_cache.py). The session sets
# them (tests/conftest.py) for all its workers, so a layer is built, and a candidate's sm_100a
# kernels compiled, once per session instead of once per runner cache. Unset (the benchmarks), each
# runner keeps its own. Tests about the compile cache itself give theirs.
SESSION_LAYERS = "FE_CI_TEST_LAYERS_DIR"
SESSION_KERNELS = "FE_CI_TEST_COMPILE_CACHE_DIR"
_SHARED = {SESSION_LAYERS: "FE_CI_LAYERS_DIR", SESSION_KERNELS: "FE_CI_COMPILE_CACHE_DIR"}


def session_caches() -> dict[str, str]:
    """``FE_CI_LAYERS_DIR`` and ``FE_CI_COMPILE_CACHE_DIR`` for a runner's environment within a
    test session; {} outside one."""
    return {setting: os.environ[ours] for ours, setting in _SHARED.items() if os.environ.get(ours)}


def service_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """This process's environment without any ``FE_CI_`` setting, plus a service's own (and the
    session's shared layers, which the runners started with ``Service.runner_env`` inherit)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_")}
    env.update(
        {
            "FE_CI_DATA_DIR": str(data_dir),
            "FE_CI_SUBMIT_TOKEN": SUBMIT,
            "FE_CI_RUNNER_TOKEN": REGISTER,
            "FE_CI_WEBHOOK_SECRET": WEBHOOK,
            "FE_CI_ADMIN_TOKEN": ADMIN,
            "FE_CI_GPU_ARCHS": "",
            "FE_CI_CACHE_DIR": str(data_dir.parent / "runner-cache"),
            "FE_CI_RUNNER_LABELS": "",
            "PYTHONPATH": str(ROOT),
            **session_caches(),
        }
    )
    env.update(extra)
    return env


class _Exited(Exception):
    """The service process ended before it answered."""


@dataclass
class Service:
    """``Service(data_dir, env).start()``; ``command`` replaces ``fe-ci serve`` (``{port}`` in it
    is filled in)."""

    data_dir: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    command: list[str] | None = None
    proc: processes.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"service-{self.port}.log"

    def _argv(self) -> list[str]:
        if self.command is None:
            return [sys.executable, "-m", "cli.main", "serve", "--port", str(self.port)]
        return [arg.format(port=self.port) for arg in self.command]

    def start(self, timeout_s: float = 60) -> Service:
        """Start it and wait until ``/healthz`` answers; a port taken meanwhile gets another."""
        for _ in range(5):
            if self._start_once(timeout_s):
                return self
            self.port = free_port()
        raise RuntimeError(f"service found no free port: {self.log_path.read_text()[-3000:]}")

    def _start_once(self, timeout_s: float) -> bool:
        with open(self.log_path, "ab") as log:
            self.proc = processes.popen(
                self._argv(), env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
            )
        proc = self.proc

        def healthy() -> bool:
            if proc.poll() is not None:
                raise _Exited
            return loopback.get(f"{self.url}/healthz", timeout=1).status_code == 200

        try:
            eventually(healthy, timeout=timeout_s, ignoring=(httpx.TransportError,),
                       message=f"the service's /healthz on port {self.port}")  # fmt: skip
        except _Exited:
            tail = self.log_path.read_text()[-3000:]
            if os.strerror(errno.EADDRINUSE).lower() in tail.lower():
                return False
            raise RuntimeError(f"service exited: {tail}") from None
        except AssertionError as exc:
            self.stop(signal.SIGKILL)
            raise RuntimeError(f"{exc}: {self.log_path.read_text()[-3000:]}") from None
        return True

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
        return loopback.client(base_url=self.url, headers=headers, timeout=60)

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.data_dir / "fe-ci.sqlite3")

    def count(self, table: str) -> int:
        with self.db() as conn:
            return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def rss_bytes(self) -> int:
        """The service process's resident memory, from /proc."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def runner_env(self, **extra: str) -> dict[str, str]:
        env = dict(self.env)
        env.update({"FE_CI_URL": self.url, "FE_CI_RUNNER_TOKEN": REGISTER}, **extra)
        return env

    def start_runner(
        self, log: Path, *args: str, module: tuple[str, ...] = ("cli.main",), **env: str
    ) -> processes.Process:
        """``python -m <module> runner <args>`` against this service, stderr appended to ``log``."""
        with open(log, "ab") as err:
            return processes.popen(
                [sys.executable, "-m", *module, "runner", *args],
                env=self.runner_env(**env),
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
