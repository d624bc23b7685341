"""Warm parents for the CPU stages of a long-running runner (``runner/inside/zygote.py``).

A zygote belongs to one dependency layer (or none: builds that declare no dependencies), and on a
cell of the matrix to its cuDNN backend too (that library first on its ``LD_LIBRARY_PATH``): it
runs, sandboxed like any stage (``jail.py``, as a uid of its own from the runner's range), in an
environment of that layer and the host's torch but no candidate, torch and the layer's heavy
modules imported. A stage of a job on that layer is then a fork of it, not a fresh interpreter.

Each stage gets a room of its own under the zygote's directory, made by the runner: its
parameters, a HOME and a folder for its document; the job's installed candidate is linked in
beside it (hard links to the job's files, which the runner owns, made once per job). The stage runs
in namespaces of its own (a pid namespace whose end is every process's it started, a fresh /tmp),
and the room is removed after it. A zygote that cannot give a stage its own namespaces serves none.

The stage keeps the contract of ``sandbox.run``: its own process group, the timeout and the
cancellation (SIGTERM, a grace period, SIGKILL), its log, an ``Outcome``. Anything wrong with the
zygote itself (it died, it does not answer) is never the build's result: ``run`` returns None
and the caller starts the stage the ordinary way.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
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
from typing import Any

from runner.envs import envs, host, layers
from runner.inside.zygote import unix_address
from runner.isolation import allowlist, jail, jobbox, limits, sandbox, stage_source, uids
from runner.isolation.held_folders import hold_folder

log = logging.getLogger("fe_ci.zygote")

# What every CPU stage imports before it reaches the candidate: torch, and the CuTe DSL that the
# frontend's Python wrappers are built on. Importing them is most of a probe's time. And
# torch._dynamo, the host torch's own, which 1.32.0's ``cudnn.ops.causal_conv1d`` imports (0.71 s
# of that module's 0.73 s on a CPU host): the probe and the refusal rows import it every time.
PRELOAD = ("torch", "cutlass", "cutlass.cute", "torch._dynamo")
START_TIMEOUT_S = 180.0
PID_TIMEOUT_S = 10.0
_LEGACY = re.compile(r"^[0-9a-f]{16}$")  # a zygote's key directly under the root, as before
Backend = tuple[layers.Layer, tuple[Path, ...]]  # a cuDNN backend's layer and library folders
Parents = tuple[layers.Layer | None, Backend | None]  # what a zygote's environment holds


@dataclass
class Zygote:
    key: str
    root: Path
    proc: subprocess.Popen[bytes]
    socket_path: Path
    python: Path
    src: Path
    uid: int | None = None
    preloaded: dict[str, str] = field(default_factory=dict)
    forks: int = 0  # stages it has run
    site_seen: tuple[str, int, int] | None = None  # the job environment linked in last
    release: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    watch: limits.Watch = field(default_factory=lambda: limits.Watch((), 0))  # the stage's room

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
        if self.uid is not None:  # the zygote ends with its sandbox, a moment after it
            uids.settle(self.uid)
        self.release.close()  # its uid: every process still running as it is killed

    def run(
        self,
        *,
        module: str,
        params: Path,
        env: dict[str, str],
        site: Path,
        log_path: Path,
        out_path: Path,
        timeout_s: float,
        cancel: threading.Event | None = None,
        grace_s: float = sandbox.GRACE_S,
    ) -> sandbox.Outcome | None:
        """Run ``python -m module --in PARAMS --out DOC`` as a child of the zygote, in a room of
        its own with the candidate installed at ``site``; its document is copied to ``out_path``
        (a file of the runner's). None if the zygote failed."""
        start = time.monotonic()
        room = self._room(params)
        self.watch = limits.Watch((room, log_path), limits.wanted().job_dir_mb)
        env = {**env, "HOME": str(room / "home"), "TMPDIR": str(room / "home")}
        env["PYTHONPATH"] = str(self.src)  # the same code as the job's copy
        request = {
            "module": module,
            "argv": ["--in", str(room / "in.json"), "--out", str(room / "out" / "doc.json")],
            "env": env,
            "cwd": str(room / "home"),
            "sites": [str(self._linked(site))],
            "python": str(self.python),
        }
        try:
            outcome = self._fork(request, log_path, start, timeout_s, cancel, grace_s)
            if outcome is not None:
                stage_source.copy_doc(room / "out" / "doc.json", out_path)
            return outcome
        finally:
            shutil.rmtree(room, ignore_errors=True)

    def _linked(self, site: Path) -> Path:
        """The job's installed candidate as the zygote sees it: hard links to the job's files (the
        runner's, read-only), made once per job environment and kept for its next stage."""
        info = site.stat()
        seen = (str(site), info.st_ino, info.st_mtime_ns)
        linked = self.root / "sites" / "current"
        if self.site_seen != seen or not linked.is_dir():
            shutil.rmtree(linked.parent, ignore_errors=True)
            jobbox.link_tree(site, linked)
            self.site_seen = seen
        return linked

    def _room(self, params: Path) -> Path:
        """The stage's room: its parameters (the runner's), a HOME and a folder for its document
        (the zygote uid's)."""
        room = self.root / "rooms" / str(self.forks + 1)
        shutil.rmtree(room, ignore_errors=True)
        room.mkdir(mode=0o755)
        shutil.copyfile(params, room / "in.json")
        for own in ("home", "out"):
            uids.hand_over(room / own, self.uid)
        return room

    def _fork(
        self,
        request: dict[str, Any],
        log_path: Path,
        start: float,
        timeout_s: float,
        cancel: threading.Event | None,
        grace_s: float,
    ) -> sandbox.Outcome | None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            conn.settimeout(PID_TIMEOUT_S)
            unix_address(conn, str(self.socket_path), bind=False)
        except OSError as exc:
            log.warning("event=zygote_unreachable key=%s error=%r", self.key, exc)
            return None
        with conn, open(log_path, "ab") as logf:
            try:
                socket.send_fds(conn, [json.dumps(request).encode()], [logf.fileno()])
                msg, fds, _flags, _addr = socket.recv_fds(conn, 4096, 1)
                json.loads(msg)["pid"]
                (stage,) = fds  # the stage's pidfd: its pid is the zygote's namespace's
            except (OSError, ValueError, KeyError) as exc:
                log.warning("event=zygote_failed key=%s error=%r", self.key, exc)
                return None
            conn.settimeout(None)
            self.forks += 1
            try:
                status, code = self._wait(conn, stage, start, timeout_s, cancel, grace_s)
                if code is None:  # the zygote went away with the stage: run it the ordinary way
                    log.warning("event=zygote_lost key=%s", self.key)
                    _kill(stage, signal.SIGKILL)
                    return None
            finally:
                os.close(stage)
        sig = -code if code < 0 else None
        if status is None:
            status = "ok" if code == 0 else ("crashed" if sig is not None else "failed")
        duration, tail = time.monotonic() - start, sandbox.tail(log_path)
        hit = limits.Applied(limits.wanted(), hit=["jobdir"]).describe_hit()
        return sandbox.Outcome(
            status, code, sig, duration, tail, hit if status == "limit" else "", True
        )

    def _wait(
        self,
        conn: socket.socket,
        stage: int,
        start: float,
        timeout_s: float,
        cancel: threading.Event | None,
        grace_s: float,
    ) -> tuple[str | None, int | None]:
        """(timeout/cancelled/limit (the room past the job dir's cap) or None, the child's exit
        code or None when the zygote died)."""
        stopped: str | None = None
        killed_at: float | None = None
        while True:
            ready, _, _ = select.select([conn], [], [], 0.2)
            if ready:
                msg = conn.recv(4096)
                if not msg:
                    return stopped, None
                return stopped, int(json.loads(msg)["status"])
            now = time.monotonic()
            if stopped is None:
                if now - start > timeout_s:
                    stopped = "timeout"
                elif cancel is not None and cancel.is_set():
                    stopped = "cancelled"
                elif self.watch.over():
                    stopped = "limit"
                if stopped is not None:
                    _kill(stage, signal.SIGTERM)
                    killed_at = now
            elif killed_at is not None and now - killed_at > grace_s:
                _kill(stage, signal.SIGKILL)
                killed_at = None


def _kill(pidfd: int, sig: int) -> None:
    """Signal the stage's first process; its namespace's init, and so every process of the
    stage, ends with it."""
    try:
        signal.pidfd_send_signal(pidfd, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Zygotes:
    """The runner's warm parents, one per dependency layer (and cuDNN backend) in use, the newest
    ``limit`` kept. Start them from a thread that lives as long as the runner (the agent's main
    thread): a zygote dies with the thread that started it. Their folders are under one this
    process holds (``held_folders``): runners sharing a cache directory never remove each
    other's zygote or its rooms.
    """

    def __init__(
        self,
        root: Path,
        *,
        limit: int = 2,
        preload: tuple[str, ...] = PRELOAD,
        uid_range: uids.UidRange | None = None,
        hidden: tuple[Path, ...] = (),
    ) -> None:
        self.root, self._held = hold_folder(root, _LEGACY.match)
        self.limit = limit
        self.preload = preload
        self.uid_range = uid_range or uids.UidRange.default()
        self.hidden = hidden  # the runner's private directories
        self._live: dict[str, Zygote] = {}
        self._refused: dict[str, str] = {}  # layers whose zygote could not isolate a stage
        self._lock = threading.Lock()

    def key(self, layer: layers.Layer | None, backend: Backend | None = None) -> str:
        blob = f"{layer and layer.spec.key}|{stage_source.digest()}|{sys.version}|{self.preload}"
        blob += f"|{backend[0].spec.key}" if backend else ""
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def get(self, layer: layers.Layer | None, backend: Backend | None = None) -> Zygote | None:
        """The live zygote of ``layer`` (None: no dependencies) and ``backend`` (a cuDNN backend
        of the matrix: its folders first on ``LD_LIBRARY_PATH``), started if needed; None if it
        cannot start, or cannot give a stage namespaces of its own."""
        key = self.key(layer, backend)
        with self._lock:
            if key in self._refused:
                return None
            found = self._live.get(key)
            if found is not None and found.alive():
                return found
            if found is not None:
                log.warning("event=zygote_gone key=%s status=%s", key, found.proc.returncode)
                found.stop()
                del self._live[key]
            try:
                started = self._start(key, (layer, backend))
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                log.warning("event=zygote_start_failed key=%s error=%s", key, exc)
                return None
            if started is None:
                return None
            self._live[key] = started
            while len(self._live) > self.limit:
                oldest = next(iter(self._live))
                self._live.pop(oldest).stop()
            return started

    def _start(self, key: str, on: Parents) -> Zygote | None:
        release = contextlib.ExitStack()  # the zygote's uid, held for its life
        uid = release.enter_context(self.uid_range.lease())
        try:
            return self._spawn(key, on, uid, release)
        except BaseException:
            release.close()
            raise

    def _spawn(
        self, key: str, on: Parents, uid: int | None, release: contextlib.ExitStack
    ) -> Zygote | None:
        start, (layer, backend) = time.monotonic(), on
        shown = [x.root for x in (layer, backend and backend[0]) if x]  # read-only
        root = self.root / key
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        env = envs.create_env(root / "env")
        if layer is not None:  # else the host's torch alone
            layers.attach(env.site_packages(), layer)
        src = stage_source.private_source(root)  # the same copy a stage gets
        home, sockets, rooms = root / "home", root / "sock", root / "rooms"
        for path in (home, rooms):  # the runner's: the zygote writes neither
            path.mkdir()
        uids.hand_over(sockets, uid)
        jail.make_reachable(rooms)
        socket_path = sockets / "zygote.sock"
        mech = jail.mechanism()
        box = jail.Box(
            uid=uid,
            rw=(sockets, rooms),
            ro=(root, *shown, *_torch_dirs(), *jail.runner_paths()),
            hidden=(*self.hidden, *jail.private_paths()),
            cwd=home,
        )
        child_env = allowlist.candidate_environ(
            "stage", home=home, path=[env.python.parent], pythonpath=src
        )
        if backend:  # the loader reads it as a process starts; torch maps libcudnn on import
            child_env["LD_LIBRARY_PATH"] = allowlist.library_path(backend[1], child_env)
        cmd = [str(env.python), "-m", "runner.inside.zygote", "--socket", str(socket_path)]
        cmd += ["--preload", ",".join(self.preload), "--tmp-bytes", str(limits.wanted().tmp_bytes)]
        applied = release.enter_context(limits.applied(uid is not None))  # with its forks
        if not mech.namespaces:  # in namespaces its parent is the sandbox's init
            cmd += ["--parent", str(os.getpid())]
        launch = mech.wrap(cmd, child_env, box)
        with open(root / "zygote.log", "ab") as errors:
            proc = subprocess.Popen(
                launch.argv,
                stdout=subprocess.PIPE,
                stderr=errors,
                stdin=subprocess.DEVNULL,
                env=launch.env,
                cwd=home,
                start_new_session=True,
                preexec_fn=applied.preexec(),
            )
        zygote = Zygote(key, root, proc, socket_path, env.python, src, uid, release=release)
        ready = self._ready(zygote)
        if not ready.get("isolated"):
            why = str(ready.get("why_not") or "no answer")
            log.warning("event=zygote_refused key=%s reason=%r (stages start fresh)", key, why)
            self._refused[key] = why
            zygote.stop()
            return None
        zygote.preloaded = ready.get("preloaded", {})
        took, spec = time.monotonic() - start, layer and layer.spec.key
        log.info("event=zygote_started key=%s layer=%s backend=%s seconds=%.2f preloaded=%s", key,
                 spec, backend and backend[0].spec.key, took, zygote.preloaded)  # fmt: skip
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
            self._held.close()  # the folder is removed by the next pool to start on its root


def _torch_dirs() -> tuple[Path, ...]:
    torch = host.host_torch()
    return (torch.site_dir,) if torch is not None else ()
