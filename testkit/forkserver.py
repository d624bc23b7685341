"""The fork server: ``python -m testkit.forkserver SOCKET``, one per test process, started by
``testkit/processes.py`` (which says why and how a test uses it).

Single-threaded, it imports what fe-ci's service, runner and CLI import (``PRELOAD``) once and,
for each request on its UNIX socket, forks a child that becomes the requested
``python -m MODULE ARGS``: the environment, working directory, ``sys.argv``, ``sys.path`` and
standard streams (passed as descriptors) the request gives, the module run as ``__main__`` as
``-m`` runs it, and the interpreter's ordinary exit (threads joined, ``atexit`` run, streams
flushed). It notes the environment variables that importing read, with their values, and says
them in its ready line: a request that gives one another value is not sent here.

It reaps each child and sends its exit status on the request's connection. It ends when its
stdin (a pipe from the process that started it) closes, or on SIGTERM, and kills every child it
forked that is still running.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import warnings
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

# What fe-ci's service, runner and CLI import before their first line of work.
PRELOAD = (
    "cli.main",
    "runner.agent.agent",
    "service.app",
    "sqlalchemy.dialects.sqlite",
    "uvicorn",
    "uvicorn.config",
    "uvicorn.server",
    "uvicorn.lifespan.on",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.auto",
    "uvicorn.loops.auto",
)

MAX_REQUEST = 1 << 20
# The process names (``/proc/PID/comm``, what ``ps`` and process accounting show: a forked child
# has no command of its own); bench/suite_pacct.py tells them apart by these.
SERVER_NAME = "fe-ci-forksrv"
CHILD_NAME = "fe-ci-forked"


def _name(name: str) -> None:
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(name)


class _Recording(MutableMapping[str, str]):
    """``os.environ`` while the modules load: what they read of it is noted."""

    def __init__(self, real: MutableMapping[str, str]) -> None:
        self.real = real
        self.read: dict[str, str | None] = {}

    def __getitem__(self, key: str) -> str:
        self.read.setdefault(key, self.real.get(key))
        return self.real[key]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.setdefault(key, self.real.get(key))
        return key in self.real

    def __setitem__(self, key: str, value: str) -> None:
        self.real[key] = value

    def __delitem__(self, key: str) -> None:
        del self.real[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)

    def copy(self) -> dict[str, str]:
        return dict(self.real)


def _preload() -> tuple[dict[str, str], dict[str, str | None]]:
    """Import ``PRELOAD``: (what could not be imported, the environment variables read meanwhile
    with the values they had). A child whose environment gives any of them another value would
    not be what ``python -m`` starts: it is not forked."""
    failed = {}
    recording = _Recording(os.environ)
    os.environ = recording  # type: ignore[assignment]  # noqa: B003 (reads are what is wanted)
    try:
        for name in PRELOAD:
            try:
                __import__(name)
            except ImportError as exc:  # an optional part (httptools, uvloop) not installed
                failed[name] = str(exc)
    finally:
        os.environ = recording.real  # type: ignore[assignment]  # noqa: B003
    return failed, recording.read


def serve(path: str) -> dict[str, Any] | None:
    """Serve fork requests on the UNIX socket ``path`` until stdin closes; returns only in a
    forked child, with its request."""
    failed, read = _preload()
    import gc

    gc.freeze()  # the preloaded objects stay shared with the children (no copy on collection)
    _name(SERVER_NAME)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: None)  # ends the loop through the wakeup fd
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "listen")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
    children: dict[int, socket.socket] = {}
    sys.stdout.write(json.dumps({"ready": True, "not_preloaded": failed, "read": read}) + "\n")
    sys.stdout.flush()
    running = True
    while running:
        for key, _ in sel.select():
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 4096):
                    running = False
            elif key.data == "wake":
                with contextlib.suppress(BlockingIOError):
                    got = os.read(wake_r, 4096)
                    if signal.SIGTERM in got:
                        running = False
                _reap(children)
            else:
                forked = _accept(listener, children)
                if forked is not None:  # the child: leave the server behind
                    request, conn = forked
                    signal.set_wakeup_fd(-1)
                    for sig in (signal.SIGCHLD, signal.SIGTERM):
                        signal.signal(sig, signal.SIG_DFL)
                    sel.close()
                    for fd in (wake_r, wake_w):
                        os.close(fd)
                    listener.close()
                    conn.close()
                    for other in children.values():
                        other.close()
                    return request
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.unlink(path)
    return None


def _accept(
    listener: socket.socket, children: dict[int, socket.socket]
) -> tuple[dict[str, Any], socket.socket] | None:
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        msg, fds, _flags, _addr = socket.recv_fds(conn, MAX_REQUEST, 3)
        request = json.loads(msg)
        if len(fds) != 3:
            raise ValueError(f"{len(fds)} descriptors, not 3")
    except (OSError, ValueError) as exc:
        for fd in fds:  # a refused request's descriptors are not kept open here
            os.close(fd)
        with contextlib.suppress(OSError):
            conn.send(json.dumps({"error": repr(exc)}).encode())
        conn.close()
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for target, fd in enumerate(fds):
            os.dup2(fd, target, inheritable=True)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        return request, conn
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    with contextlib.suppress(OSError):
        conn.send(json.dumps({"pid": pid}).encode())
    return None


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
            conn.close()


def become(request: Mapping[str, Any], base_path: Sequence[str]) -> None:
    """In the forked child: take the request's environment, place and arguments, and run its
    module as ``python -m`` would."""
    _name(CHILD_NAME)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.getcwd(), *extra, *base_path]
    if request["env"].get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(write_through=True)
    if request["env"].get("PYTHONWARNINGS"):
        warnings._processoptions(request["env"]["PYTHONWARNINGS"].split(","))  # type: ignore[attr-defined]
    sys.argv = [request["module"], *request["args"]]
    sys.modules.pop(request["module"], None)  # preloaded: run afresh as __main__, as -m does
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def _base_path() -> list[str]:
    """This interpreter's path without its working directory and PYTHONPATH entries."""
    own = {os.getcwd(), "", *os.environ.get("PYTHONPATH", "").split(os.pathsep)}
    return [p for p in sys.path if p not in own]


def main() -> None:
    base = _base_path()
    request = serve(sys.argv[1])
    if request is not None:
        become(request, base)


if __name__ == "__main__":
    main()
