"""The uids candidates run as: one per job (and one per warm zygote), from a range the runner owns.

A job's processes run as a uid no other live job holds, so one build can never touch another's
files: the runner hands the job's writable directories to that uid before a stage and takes them
back (owner root again, set-id bits cleared) after it. A uid is held by an exclusive lock on
``<locks>/<uid>.lock`` while in use, so runners sharing a cache directory never pick the same one,
and handed out in turn (the next free after the last one given), so a uid comes back only after
the whole range has gone round. On release every process still running as it is killed.

Only a runner that is root can run candidates as another uid; elsewhere ``lease`` yields None and
the report's ``sandbox`` names the missing ``uid`` layer.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger("fe_ci.uids")

DEFAULT_BASE = 200_000
DEFAULT_SPAN = 10_000


def locks_dir() -> Path:
    """Host-wide, so every runner of the host takes its uids from the same locks."""
    run = Path("/run")
    return (run if run.is_dir() else Path(tempfile.gettempdir())) / "fe-ci-uids"


class NoFreeUid(RuntimeError):
    pass


@dataclass(frozen=True)
class UidRange:
    base: int
    span: int
    locks: Path  # a directory only the runner can write

    @classmethod
    def default(cls, base: int = DEFAULT_BASE, span: int = DEFAULT_SPAN) -> UidRange:
        return cls(base, span, locks_dir())

    @contextlib.contextmanager
    def lease(self) -> Iterator[int | None]:
        """A uid for one job (None where the runner cannot switch uids); released after."""
        if os.geteuid() != 0:
            yield None
            return
        uid, held = self._take()
        try:
            yield uid
        finally:
            reap(uid)
            held.close()  # closing the file releases its lock

    def _take(self) -> tuple[int, IO[str]]:
        self.locks.mkdir(parents=True, exist_ok=True)
        os.chmod(self.locks, 0o700)
        with open(self.locks / "turn", "a+") as turn:
            fcntl.flock(turn, fcntl.LOCK_EX)
            turn.seek(0)
            text = turn.read().strip()
            start = int(text) - self.base if text.isdigit() else 0
            for i in range(self.span):
                uid = self.base + (start + i) % self.span
                held = open(self.locks / f"{uid}.lock", "a")  # noqa: SIM115 (held while in use)
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    held.close()
                    continue
                turn.seek(0)
                turn.truncate()
                turn.write(str(self.base + (start + i + 1) % self.span))
                reap(uid)  # a process of a runner that died while holding it
                return uid, held
        raise NoFreeUid(f"every uid of {self.base}..{self.base + self.span - 1} is in use")


def settle(uid: int, timeout_s: float = 2.0) -> None:
    """Wait, briefly, for the processes of ``uid`` to end on their own: a sandbox's processes end
    with its parent (``--die-with-parent``), a moment after it. What is left is ``reap``'s."""
    deadline = time.monotonic() + timeout_s
    while running_as(uid) and time.monotonic() < deadline:
        time.sleep(0.02)


def running_as(uid: int) -> list[int]:
    """The pids of live processes whose real, effective or saved uid is ``uid``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            continue
        zombie = fields.get("State", "").split()[:1] == ["Z"]  # dead, waiting for its parent
        if not zombie and str(uid) in fields.get("Uid", "").split()[:3]:
            found.append(int(entry.name))
    return found


def reap(uid: int, rounds: int = 50) -> int:
    """Kill every process running as ``uid`` (root only); how many were found alive."""
    if os.geteuid() != 0:
        return 0
    killed: set[int] = set()
    for _ in range(rounds):  # a process may fork while we look: go round until none is left
        pids = running_as(uid)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed.update(pids)
        time.sleep(0.01)
    if killed:
        log.warning("event=sandbox_uid_reaped uid=%s processes=%s", uid, len(killed))
    return len(killed)


def hand_over(path: Path, uid: int | None, mode: int = 0o700) -> None:
    """Create ``path`` if needed and give it (the directory itself) to ``uid``."""
    path.mkdir(parents=True, exist_ok=True)
    if uid is None:
        return
    os.chown(path, uid, uid)
    os.chmod(path, mode)


def hand_over_tree(root: Path, uid: int | None, *, files: bool = False) -> None:
    """Let ``uid`` add to every directory under ``root``, and with ``files`` change its files.
    Without, files stay as they are: one the runner put there (a published compile-cache entry,
    linked in) stays the runner's, read-only."""
    if uid is None or not root.is_dir() or root.is_symlink():
        return
    for here, _dirs, names in os.walk(root):  # links are never followed
        os.chown(here, uid, uid, follow_symlinks=False)
        for name in names if files else ():
            os.chown(os.path.join(here, name), uid, uid, follow_symlinks=False)


def take_back(root: Path) -> None:
    """Make everything under ``root`` the runner's again, with no set-uid or set-gid bit: once
    taken back, nothing the job's uid left there can be changed by it, or run with its rights."""
    if os.geteuid() != 0 or not root.exists() or root.is_symlink():
        return
    _chown_tree(root, os.geteuid())


def _chown_tree(root: Path, uid: int) -> None:
    gid = uid if uid != os.geteuid() else os.getegid()
    for here, dirs, files in os.walk(root):  # links are never followed, only changed themselves
        entries = [here, *(os.path.join(here, n) for n in [*files, *dirs])]
        for path in entries if here == str(root) else entries[1:]:
            with contextlib.suppress(FileNotFoundError):
                info = os.lstat(path)
                os.chown(path, uid, gid, follow_symlinks=False)
                if not stat.S_ISLNK(info.st_mode) and info.st_mode & (stat.S_ISUID | stat.S_ISGID):
                    os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
