"""A function run in a forked process, its JSON result read back through a pipe.

For work that must not share the caller's in-process state (each arm of a compile-only run: the
frontend caches compiled kernels per process) and may run beside other such work. The child runs
only the function and ends with ``os._exit``; an exception it raised is raised again in the
caller as a ``RuntimeError`` naming it. The child dies with the caller, even one killed with
SIGKILL (``PR_SET_PDEATHSIG``): a compile-only worker its stage kills at its timeout takes its
arms with it, and it stays in the stage's process group, which the sandbox kills at the end.
Standard library only.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

PR_SET_PDEATHSIG = 1


class Child(NamedTuple):
    pid: int
    read: int  # the pipe's read end


def _die_with(parent: int) -> None:
    """SIGKILL when the parent dies; ended at once if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to tie it to
        return
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def start(fn: Callable[..., dict[str, Any]], *args: Any) -> Child:
    """Fork; the child writes ``fn(*args)`` (or the exception it raised) as JSON to a pipe and
    ends. ``result`` collects it."""
    read, write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: nothing of it but this call runs
        os.close(read)
        _die_with(parent)
        try:
            doc = fn(*args)
        except BaseException as exc:  # reported to the parent, which raises it there
            doc = {"error": f"{type(exc).__name__}: {exc}", "log_tail": traceback.format_exc()}
        data = json.dumps(doc).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(write, view) :]
        os._exit(0)
    os.close(write)
    return Child(pid, read)


def result(child: Child) -> dict[str, Any]:
    """The child's document, once it has ended (reaped); its exception raised here."""
    chunks = []
    while chunk := os.read(child.read, 1 << 16):
        chunks.append(chunk)
    os.close(child.read)
    os.waitpid(child.pid, 0)
    if not chunks:
        raise RuntimeError("the forked process ended without a result")
    doc: dict[str, Any] = json.loads(b"".join(chunks))
    if "error" in doc:
        raise RuntimeError(doc["error"])
    return doc
