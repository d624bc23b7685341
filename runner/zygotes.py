"""Warm parents for the CPU stages of a long-running runner (``runner/inside/zygote.py``).

A zygote belongs to one dependency layer: it runs, sandboxed like any stage, in an environment
holding that layer and the host's torch but no candidate, with torch and the layer's heavy
modules already imported. A stage of a job whose environment is that layer plus its candidate is
then a fork instead of a fresh interpreter: the probe of a warm build costs its own imports only.

The stage keeps the contract of ``sandbox.run``: its own process group, the timeout and the
cancellation (SIGTERM, a grace period, SIGKILL), its log, an ``Outcome``. Anything wrong with the
zygote itself (it died, it does not answer) is never the build's result: ``run`` returns None
and the caller starts the stage the ordinary way.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from runner import candidate, envs, layers, sandbox
from runner.inside.zygote import unix_address

log = logging.getLogger("fe_ci.zygote")

# What every CPU stage imports before it reaches the candidate: torch, and the CuTe DSL that the
# frontend's Python wrappers are built on. Importing them is most of a probe's time.
PRELOAD = ("torch", "cutlass", "cutlass.cute")
START_TIMEOUT_S = 180.0
PID_TIMEOUT_S = 10.0


def _source_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(candidate.INSIDE_SRC.rglob("*.py")):
        h.update(path.relative_to(candidate.INSIDE_SRC).as_posix().encode())
        h.update(path.read_bytes())
    for name in candidate.CORE_FOR_CANDIDATE:
        h.update(f"core/{name}".encode())
        h.update((candidate.CORE_SRC / name).read_bytes())
    return h.hexdigest()[:12]


@dataclass
class Zygote:
    key: str
    root: Path
    proc: subprocess.Popen[bytes]
    socket_path: Path
    python: Path
    preloaded: dict[str, str] = field(default_factory=dict)
    forks: int = 0  # stages it has run

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def run(
        self,
        *,
        module: str,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        sites: list[Path],
        python: Path,
        log_path: Path,
        timeout_s: float,
        cancel: threading.Event | None = None,
        grace_s: float = sandbox.GRACE_S,
    ) -> sandbox.Outcome | None:
        """Run ``python -m module argv`` as a child of the zygote; None if the zygote failed."""
        request = {
            "module": module,
            "argv": argv,
            "env": env,
            "cwd": str(cwd),
            "sites": [str(p) for p in sites],
            "python": str(python),
        }
        log_path.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        try:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.settimeout(PID_TIMEOUT_S)
            unix_address(conn, str(self.socket_path), bind=False)
        except OSError as exc:
            log.warning("event=zygote_unreachable key=%s error=%r", self.key, exc)
            return None
        with conn, open(log_path, "ab") as logf:
            try:
                socket.send_fds(conn, [json.dumps(request).encode()], [logf.fileno()])
                reader = conn.makefile("rb")
                pid = int(json.loads(reader.readline())["pid"])
            except (OSError, ValueError, KeyError) as exc:
                log.warning("event=zygote_failed key=%s error=%r", self.key, exc)
                return None
            conn.settimeout(None)
            self.forks += 1
            status, code = self._wait(conn, reader, pid, start, timeout_s, cancel, grace_s)
        if code is None:  # the zygote went away with the stage: run it again the ordinary way
            log.warning("event=zygote_lost key=%s pid=%s", self.key, pid)
            _kill(pid, signal.SIGKILL)
            return None
        sig = -code if code < 0 else None
        if status is None:
            status = "ok" if code == 0 else ("crashed" if sig is not None else "failed")
        duration = time.monotonic() - start
        return sandbox.Outcome(status, code, sig, duration, sandbox.tail(log_path))

    def _wait(
        self,
        conn: socket.socket,
        reader: IO[bytes],
        pid: int,
        start: float,
        timeout_s: float,
        cancel: threading.Event | None,
        grace_s: float,
    ) -> tuple[str | None, int | None]:
        """(timeout/cancelled or None, the child's exit code or None when the zygote died)."""
        stopped: str | None = None
        killed_at: float | None = None
        while True:
            ready, _, _ = select.select([conn], [], [], 0.2)
            if ready:
                line = reader.readline()
                if not line:
                    return stopped, None
                _kill(pid, signal.SIGKILL)  # whatever it left in its group goes with it
                return stopped, int(json.loads(line)["status"])
            now = time.monotonic()
            if stopped is None:
                if now - start > timeout_s:
                    stopped = "timeout"
                elif cancel is not None and cancel.is_set():
                    stopped = "cancelled"
                if stopped is not None:
                    _kill(pid, signal.SIGTERM)
                    killed_at = now
            elif killed_at is not None and now - killed_at > grace_s:
                _kill(pid, signal.SIGKILL)
                killed_at = None


def _kill(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Zygotes:
    """The runner's warm parents, one per dependency layer in use (the newest ``limit`` kept).

    Start them from a thread that lives as long as the runner (the agent's main thread): a
    zygote dies with the thread that started it.
    """

    def __init__(self, root: Path, *, limit: int = 2, preload: tuple[str, ...] = PRELOAD) -> None:
        self.root = root
        self.limit = limit
        self.preload = preload
        self._live: dict[str, Zygote] = {}
        self._lock = threading.Lock()

    def key(self, layer: layers.Layer) -> str:
        blob = f"{layer.spec.key}|{_source_digest()}|{sys.version}|{self.preload}"
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def get(self, layer: layers.Layer, environ: dict[str, str]) -> Zygote | None:
        """The live zygote of ``layer``, started if needed; None if it cannot start."""
        key = self.key(layer)
        with self._lock:
            found = self._live.get(key)
            if found is not None and found.alive():
                return found
            if found is not None:
                log.warning("event=zygote_gone key=%s status=%s", key, found.proc.returncode)
                found.stop()
                del self._live[key]
            try:
                started = self._start(key, layer, environ)
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                log.warning("event=zygote_start_failed key=%s error=%s", key, exc)
                return None
            self._live[key] = started
            while len(self._live) > self.limit:
                oldest = next(iter(self._live))
                self._live.pop(oldest).stop()
            return started

    def _start(self, key: str, layer: layers.Layer, environ: dict[str, str]) -> Zygote:
        start = time.monotonic()
        root = self.root / key
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        env = envs.create_env(root / "env")
        layers.attach(env.site_packages(), layer)
        src = candidate.private_source(root)  # the same copy a stage gets
        home, sockets = root / "home", root / "sock"
        for path in (home, sockets):
            path.mkdir()
            sandbox.hand_over(path)
        sandbox.make_reachable(env.python)
        if (torch := envs.host_torch()) is not None:
            sandbox.make_reachable(torch.site_dir)
        socket_path = sockets / "zygote.sock"
        child_env = dict(environ)
        child_env.update(
            PYTHONPATH=str(src), PYTHONDONTWRITEBYTECODE="1", HOME=str(home), TMPDIR=str(home)
        )
        cmd = [*sandbox.isolation_prefix(), str(env.python), "-m", "runner.inside.zygote"]
        cmd += ["--socket", str(socket_path), "--preload", ",".join(self.preload)]
        cmd += ["--parent", str(os.getpid())]
        with open(root / "zygote.log", "ab") as errors:
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=errors,
                stdin=subprocess.DEVNULL,
                env=child_env,
                cwd=home,
                start_new_session=True,
            )
        zygote = Zygote(key, root, proc, socket_path, env.python)
        ready = self._ready(zygote)
        zygote.preloaded = ready.get("preloaded", {})
        log.info(
            "event=zygote_started key=%s layer=%s seconds=%.2f preloaded=%s",
            key,
            layer.spec.key,
            time.monotonic() - start,
            zygote.preloaded,
        )
        return zygote

    @staticmethod
    def _ready(zygote: Zygote) -> dict[str, Any]:
        assert zygote.proc.stdout is not None
        ready, _, _ = select.select([zygote.proc.stdout], [], [], START_TIMEOUT_S)
        line = zygote.proc.stdout.readline() if ready else b""
        try:
            doc: dict[str, Any] = json.loads(line)
        except ValueError:
            doc = {}
        if not doc.get("ready"):
            zygote.stop()
            why = sandbox.tail(zygote.root / "zygote.log", 600).strip() or "no answer"
            raise RuntimeError(f"the zygote did not start: {why}")
        return doc

    def close(self) -> None:
        with self._lock:
            for zygote in self._live.values():
                zygote.stop()
            self._live.clear()
