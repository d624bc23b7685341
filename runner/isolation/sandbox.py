"""Run one stage as a child process in its own process group, with a timeout and a log.

A candidate's processes run in the sandbox ``jail.py`` builds (``box``), so that nothing of them
outlives the stage.

A hang is killed (SIGTERM to the whole group, a grace period, then SIGKILL) and reported as
``timeout``; death by a signal is ``crashed`` with the log's tail. Cancellation works the same way
through ``cancel``, an Event the caller may set from another thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.isolation import jail, limits

log = logging.getLogger("fe_ci.sandbox")

GRACE_S = 5.0
TAIL_BYTES = 4000


@dataclass(frozen=True)
class Outcome:
    status: str  # "ok" | "failed" | "timeout" | "crashed" | "cancelled" | "limit" | "refused"
    returncode: int | None
    signal: int | None
    duration_s: float
    log_tail: str
    # "limit": which of the sandbox's limits it ran into (``limits.py``); "refused": what the
    # candidate left that the runner refuses to read; said in words
    why: str = ""
    warm: bool = False  # forked from a warm worker (``zygotes.py``): its uid serves other jobs

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        if self.status == "timeout":
            return f"killed after {self.duration_s:.0f} s (stage timeout)"
        if self.status == "crashed" and self.signal is not None:
            return f"died by signal {signal.Signals(self.signal).name}"
        if self.status == "cancelled":
            return "cancelled"
        if self.status == "limit":
            return f"stopped: {self.why}"
        if self.status == "refused":
            return self.why
        if self.status == "failed":
            return f"exited with status {self.returncode}"
        return "ok"


def tail(path: Path, limit: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    try:  # the leader may be gone while its children linger: kill the group regardless
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run(
    cmd: list[str],
    *,
    timeout_s: float,
    log_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    cancel: threading.Event | None = None,
    grace_s: float = GRACE_S,
    box: jail.Box | None = None,
) -> Outcome:
    """Run ``cmd`` to completion, timeout or cancellation; stdout and stderr go to ``log_path``.

    With ``box``, in the sandbox (``jail.py``): ``env`` is then the whole environment the command
    gets, and every process it starts ends with it where the host gives it a pid namespace.
    """
    mech = jail.mechanism() if box is not None else None
    launch = jail.Launch(cmd, dict(os.environ) if env is None else env)
    with contextlib.ExitStack() as held:
        watch = limits.Watch((), 0)
        applied = None
        reader = writer = None
        if mech is not None and box is not None:
            applied = held.enter_context(limits.applied(mech.uid_drop and box.uid is not None))
            watch = limits.Watch((*box.rw, log_path), applied.limits.job_dir_mb)
            if mech.namespaces and applied.limits.tmp_mb:  # the init says which tmpfs was full
                reader, writer = os.pipe()
                held.callback(os.close, reader)
            launch = mech.wrap(cmd, launch.env, box, report_fd=writer)
            cwd = box.cwd or cwd
        log_path.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(
                    launch.argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=launch.env,
                    cwd=cwd,
                    start_new_session=True,
                    pass_fds=() if writer is None else (writer,),
                    preexec_fn=applied.preexec() if applied is not None else None,
                )
            finally:
                if writer is not None:
                    os.close(writer)
            status = _wait(proc, start, timeout_s, cancel, grace_s, watch)
            try:  # a leader that exited on its own may leave children in its group
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if applied is not None:
            if status == "jobdir":
                applied.hit.append("jobdir")
            if reader is not None:
                applied.hit += _full_tmpfs(reader)
            applied.finish()
    duration = time.monotonic() - start
    rc = proc.returncode
    if mech is not None and mech.namespaces and rc is not None and 128 < rc <= 128 + 64:
        rc = 128 - rc  # the namespace's init reports a signal N as 128 + N
    sig = -rc if rc is not None and rc < 0 else None
    hit = ""
    if applied is not None and applied.hit and status not in ("timeout", "cancelled"):
        status, hit = "limit", applied.describe_hit()
    if status is None:
        status = "ok" if rc == 0 else ("crashed" if sig is not None else "failed")
    return Outcome(status, rc, sig, duration, tail(log_path), hit)


def _wait(
    proc: subprocess.Popen[bytes],
    start: float,
    timeout_s: float,
    cancel: threading.Event | None,
    grace_s: float,
    watch: limits.Watch,
) -> str | None:
    """Until the stage ends: None, or why it was stopped (``timeout``, ``cancelled``, ``jobdir``:
    its writable directories grew past their cap)."""
    while True:
        try:
            proc.wait(timeout=0.2)
            return None
        except subprocess.TimeoutExpired:
            pass
        status = None
        if time.monotonic() - start > timeout_s:
            status = "timeout"
        elif cancel is not None and cancel.is_set():
            status = "cancelled"
        elif watch.over():
            status = "jobdir"
        if status is not None:
            _kill_group(proc, grace_s if status != "jobdir" else 0.0)
            return status


def _full_tmpfs(reader: int) -> list[str]:
    """What the sandbox's init said of its tmpfs (``nsinit.report``): the full ones."""
    os.set_blocking(reader, False)
    try:
        text = os.read(reader, 4096).decode("ascii", "replace")
    except OSError:
        return []
    return [line.split(" ", 1)[1] for line in text.splitlines() if line.startswith("tmpfull ")]


def isolation() -> str:
    """The isolation applied to candidate processes and its limits, stated honestly for the
    report."""
    return jail.isolation()


CAPTURE_BYTES = 1 << 20


def capture(
    cmd: list[str], *, env: dict[str, str], box: jail.Box | None, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """``cmd``'s output (in ``box`` when given): for a short question asked of a candidate's
    environment, whose answer the runner needs. What the candidate can print there (a ``.pth``
    file runs) is hostile: each stream is kept to its first ``CAPTURE_BYTES``, the rest drained
    unread, and bytes that are not UTF-8 are replaced."""
    launch = jail.Launch(cmd, env)
    if box is not None:
        launch = jail.mechanism().wrap(cmd, env, box)
    proc = subprocess.Popen(
        launch.argv,
        env=launch.env,
        cwd=box.cwd if box is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    kept: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
    readers = [
        threading.Thread(target=_keep_head, args=(pipe, kept[n]), daemon=True)
        for n, pipe in ((1, proc.stdout), (2, proc.stderr))
    ]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout=timeout_s)
        rc, said = proc.returncode, ""
    except subprocess.TimeoutExpired:
        _kill_group(proc, 0.0)
        rc, said = -9, f"no answer in {timeout_s:.0f} s"
    for reader in readers:
        reader.join(timeout=5)
    out, err = (kept[n].decode("utf-8", "replace") for n in (1, 2))
    return subprocess.CompletedProcess(launch.argv, rc, out, said or err)


def _keep_head(pipe: Any, into: bytearray) -> None:
    with pipe:
        while chunk := pipe.read(65536):
            into += chunk[: max(0, CAPTURE_BYTES - len(into))]
