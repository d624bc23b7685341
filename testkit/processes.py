"""fe-ci's own processes in a test session, forked from a warm parent instead of started afresh.

A service start is about 1 s of CPU, nearly all of it importing FastAPI, SQLAlchemy, pydantic and
fe-ci's modules (``bench/service_starts.py``); a runner or CLI start about 0.4 s. A test session
starts some hundreds of them on a 2-core machine. ``popen`` and ``run`` take the place of
``subprocess.Popen`` and ``subprocess.run`` for ``python -m MODULE ...``: where they can, the
process is a fork of this test process's fork server (``testkit/forkserver.py``), which imported
those modules once; such a start costs about 0.13 s of CPU. What runs is the real code, as
``python -m`` runs it, on real sockets and files; only its imports were done before it existed.

The child's parent is the server, not the test: ``Forked`` gives a test what it used of
``subprocess.Popen`` (``pid``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``,
``returncode``, pipes and ``communicate``).

Only what the preloaded code can serve is forked: ``-m`` of a module with this interpreter, this
checkout last on ``PYTHONPATH`` (entries before it, a test's fake subjects, come first on the
child's path), and every environment variable that the imports read (``FE_CI_EXTRA_SUBJECTS``,
``HOME``, the locale's) as the server had it. Anything else, and every start where
``FE_CI_TEST_FORKSERVER`` is not set (the benchmarks, which measure real starts), runs as an
ordinary subprocess.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
ENABLED = "FE_CI_TEST_FORKSERVER"  # set (to 1) by tests/conftest.py for the whole session
START_TIMEOUT_S = 60.0

StreamArg = int | IO[Any] | None


class Forked:
    """A child of the fork server, with the part of ``subprocess.Popen`` the tests use."""

    def __init__(self, conn: socket.socket, pid: int, args: list[str], pipes: dict[str, Any]):
        self._conn = conn
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self.stdin: IO[Any] | None = pipes.get("stdin")
        self.stdout: IO[Any] | None = pipes.get("stdout")
        self.stderr: IO[Any] | None = pipes.get("stderr")

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        self._conn.settimeout(timeout)
        try:
            msg = self._conn.recv(4096)
        except (TimeoutError, BlockingIOError):  # no status yet
            return None
        self.returncode = int(json.loads(msg)["returncode"]) if msg else -signal.SIGKILL
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._status(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(
        self, input: bytes | str | None = None, timeout: float | None = None
    ) -> tuple[Any, Any]:
        """Write ``input``, read stdout and stderr to their end, wait; as ``Popen.communicate``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                if input:
                    self.stdin.write(input)
                self.stdin.close()
        out: dict[str, Any] = {}
        readers = [
            threading.Thread(target=lambda n=n, s=s: out.__setitem__(n, s.read()), daemon=True)
            for n, s in (("stdout", self.stdout), ("stderr", self.stderr))
            if s is not None
        ]
        for t in readers:
            t.start()
        for t in readers:
            t.join(None if deadline is None else max(deadline - time.monotonic(), 0))
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.01))
        for s in (self.stdout, self.stderr):
            if s is not None:
                s.close()
        return out.get("stdout"), out.get("stderr")

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc: object) -> None:
        for s in (self.stdin, self.stdout, self.stderr):
            if s is not None:
                s.close()
        self.wait()


Process = Forked | subprocess.Popen[Any]


class Server:
    """The client's end: the server process and its socket."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="fe-ci-forkserver-")
        self.path = os.path.join(self._dir, "sock")
        env = {k: v for k, v in os.environ.items() if k != ENABLED}
        env["PYTHONPATH"] = str(ROOT)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "testkit.forkserver", self.path],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        ready_in_time, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT_S)
        if not ready_in_time:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"the fork server was not ready within {START_TIMEOUT_S:g} s")
        line = self.proc.stdout.readline()
        ready = json.loads(line) if line else {}
        if not ready.get("ready"):
            raise RuntimeError(f"the fork server did not start (exit {self.proc.poll()})")
        self.read: dict[str, str | None] = ready["read"]

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether a child with ``env`` sees at import what the preloaded modules saw."""
        return all(env.get(name) == value for name, value in self.read.items())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(
        self,
        module: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | os.PathLike[str],
        stdin: StreamArg,
        stdout: StreamArg,
        stderr: StreamArg,
        text: bool,
    ) -> Forked:
        pipes: dict[str, Any] = {}
        send: list[int] = []
        close: list[int] = []
        null = None
        try:
            for name, arg, reading in (
                ("stdin", stdin, False),
                ("stdout", stdout, True),
                ("stderr", stderr, True),
            ):
                if arg == subprocess.PIPE:
                    r, w = os.pipe()
                    ours, theirs = (r, w) if reading else (w, r)
                    mode = ("r" if reading else "w") + ("" if text else "b")
                    pipes[name] = open(ours, mode)  # noqa: SIM115
                    send.append(theirs)
                    close.append(theirs)
                elif arg == subprocess.STDOUT:
                    send.append(send[1])
                elif arg == subprocess.DEVNULL or (arg is None and name == "stdin"):
                    if null is None:
                        null = os.open(os.devnull, os.O_RDWR)
                        close.append(null)
                    send.append(null)
                elif arg is None:
                    send.append(2 if name == "stderr" else 1)  # this process's own
                elif isinstance(arg, int):
                    send.append(arg)
                else:
                    send.append(arg.fileno())
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            conn.settimeout(START_TIMEOUT_S)
            conn.connect(self.path)
            request = {"module": module, "args": list(args), "env": dict(env), "cwd": str(cwd)}
            socket.send_fds(conn, [json.dumps(request).encode()], send)
            reply = json.loads(conn.recv(4096) or b"{}")
        finally:
            for fd in close:
                os.close(fd)
        if "pid" not in reply:
            conn.close()
            raise RuntimeError(f"the fork server refused: {reply}")
        return Forked(conn, int(reply["pid"]), [sys.executable, "-m", module, *args], pipes)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self._dir)


_server: Server | None = None
_lock = threading.Lock()


def _shared() -> Server:
    global _server
    with _lock:
        if _server is None or not _server.alive():
            _server = Server()
        return _server


def close() -> None:
    """Stop this process's fork server, if it started one (and every child still running)."""
    global _server
    with _lock:
        if _server is not None:
            _server.close()
            _server = None


def _forkable(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The module of ``argv`` if it is ``<this python> -m MODULE ...`` with this checkout on the
    path the preloaded code came from; else None."""
    if len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-m":
        return None
    entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not entries or Path(entries[-1]).resolve() != ROOT:
        return None
    return argv[2]


def popen(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] = ROOT,
    stdin: StreamArg = None,
    stdout: StreamArg = None,
    stderr: StreamArg = None,
    text: bool = False,
) -> Process:
    """``subprocess.Popen(argv, ...)``, forked from the warm server where it can be."""
    module = _forkable(argv, env) if os.environ.get(ENABLED) else None
    server = _shared() if module is not None else None
    if module is None or server is None or not server.serves(env):
        return subprocess.Popen(
            list(argv), env=dict(env), cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
            text=text,
        )  # fmt: skip
    return server.spawn(
        module, argv[3:], env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, text=text
    )


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] = ROOT,
    input: str | bytes | None = None,
    timeout: float | None = None,
    text: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(argv, capture_output=True, ...)``, forked where it can be."""
    proc = popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=text,
    )
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    assert proc.returncode is not None
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
