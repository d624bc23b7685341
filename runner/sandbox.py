"""Run one stage as a child process in its own process group, with a timeout and a log.

A hang is killed (SIGTERM to the whole group, a grace period, then SIGKILL) and reported as
``timeout``; death by a signal is ``crashed`` with the log's tail. Cancellation works the same way
through ``cancel``, an Event the caller may set from another thread.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("fe_ci.sandbox")

GRACE_S = 5.0
TAIL_BYTES = 4000


@dataclass(frozen=True)
class Outcome:
    status: str  # "ok" | "failed" | "timeout" | "crashed" | "cancelled"
    returncode: int | None
    signal: int | None
    duration_s: float
    log_tail: str

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
    isolate: bool = False,
) -> Outcome:
    """Run ``cmd`` to completion, timeout or cancellation; stdout and stderr go to ``log_path``."""
    if isolate:
        cmd = [*isolation_prefix(), *cmd]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        status = None
        while True:
            try:
                proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() - start > timeout_s:
                status = "timeout"
            elif cancel is not None and cancel.is_set():
                status = "cancelled"
            if status is not None:
                _kill_group(proc, grace_s)
                break
        try:  # a leader that exited on its own may leave children in its group
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    duration = time.monotonic() - start
    rc = proc.returncode
    sig = -rc if rc is not None and rc < 0 else None
    if status is None:
        status = "ok" if rc == 0 else ("crashed" if sig is not None else "failed")
    return Outcome(status, rc, sig, duration, tail(log_path))


UNPRIVILEGED_UID = 65534  # nobody


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.cache
def _mechanisms() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(command prefix, names) of the isolation this host allows, found by trying it once.

    ``netns``: a fresh network namespace (``unshare --net``; needs root or CAP_SYS_ADMIN): no
    interface but a downed loopback, so no socket reaches anything, 127.0.0.1 included.
    ``uid``: when the runner is root, the candidate runs as ``nobody`` with no groups and
    no_new_privs (``setpriv``), provided that user can run this interpreter.
    """
    if os.environ.get("FE_CI_SANDBOX", "auto") == "none":
        return (), ()
    prefix: list[str] = []
    names: list[str] = []
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    if unshare and _works([unshare, "--net", "--", "true"]):
        prefix += [unshare, "--net", "--"]
        names.append("netns")
    if setpriv and os.geteuid() == 0:
        drop = [
            setpriv,
            f"--reuid={UNPRIVILEGED_UID}",
            f"--regid={UNPRIVILEGED_UID}",
            "--clear-groups",
            "--no-new-privs",
            "--",
        ]
        if _works([*drop, sys.executable, "-c", "pass"]):
            prefix += drop
            names.append("uid")
    return tuple(prefix), tuple(names)


def isolation_prefix() -> list[str]:
    return list(_mechanisms()[0])


def drops_privileges() -> bool:
    return "uid" in _mechanisms()[1]


def isolation() -> str:
    """The isolation applied to candidate processes, stated honestly for the report."""
    names = _mechanisms()[1]
    return ",".join(names) if names else "none"


def hand_over(path: Path) -> None:
    """Let the unprivileged candidate write under ``path`` (its results, its compile cache)."""
    if not drops_privileges():
        return
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    make_reachable(path)


def make_reachable(path: Path) -> None:
    """Grant search (``o+x``, never listing) on each ancestor of ``path`` that withholds it.

    A job directory under a private parent (``/tmp/pytest-of-root`` is 0700, so is a root
    home) would leave the unprivileged candidate unable to reach its own environment, and it
    would fail with a misleading ``No module named ...``.
    """
    if not drops_privileges():
        return
    for parent in Path(os.path.abspath(path)).parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(parent, stat.S_IMODE(mode) | stat.S_IXOTH)
            log.info("granted search permission on %s so the sandboxed candidate can reach %s",
                     parent, path)  # fmt: skip
