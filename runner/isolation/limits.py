"""The limits of every sandbox: processes, memory, the size of its private tmpfs, the size of what
it writes in the job's directory.

- **pids** and **memory**: a cgroup of the stage's own, made by the runner (root) before the stage
  starts and removed after it: cgroup v2 (``pids.max``, ``memory.max``) where the host's unified
  hierarchy has both controllers and lets the runner enable them below its own cgroup, cgroup v1's
  ``pids`` and ``memory`` hierarchies where those are mounted and writable (this CPU host: a v1
  hierarchy beside an empty unified one). Without a usable cgroup the pids limit falls back to
  ``RLIMIT_NPROC`` (per uid, so it holds only where the stage has a uid of its own) and memory has
  none: ``RLIMIT_AS`` would break CUDA, which reserves far more address space than it uses, and
  ``RLIMIT_DATA`` counts the same reservations. A hit is read from the cgroup's own counters
  (``pids.events``, the OOM kills) after the stage, so it is named even when the candidate
  swallows the failed ``fork``.
- **tmp**: ``/tmp``, ``/var/tmp`` and ``/dev/shm`` are tmpfs of ``tmp_mb`` each (bwrap's
  ``--size``, ``nsinit``'s ``size=``); the sandbox's init says which one was full when the command
  ended (``nsinit.py``, on a descriptor the candidate does not hold).
- **job dir**: what the stage's writable directories and its log hold, measured while it runs
  (``Watch``); past ``job_dir_mb`` the stage's process group is killed.

Settings (``FE_CI_SANDBOX_PIDS``, ``FE_CI_SANDBOX_MEMORY_MB``, ``FE_CI_SANDBOX_TMP_MB``,
``FE_CI_JOB_DIR_MB``; 0 turns one off). ``describe`` is the report's part of ``sandbox``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import resource
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from runner.config import RunnerSettings

log = logging.getLogger("fe_ci.limits")

CGROUP_ROOT = Path("/sys/fs/cgroup")
OUR_GROUP = "fe-ci-stages"
WATCH_EVERY_S = 0.5


@dataclass(frozen=True)
class Limits:
    pids: int
    memory_mb: int
    tmp_mb: int
    job_dir_mb: int

    @property
    def tmp_bytes(self) -> int:
        """Each private tmpfs's size; 0: unsized."""
        return self.tmp_mb << 20


@functools.cache
def wanted() -> Limits:
    s = RunnerSettings()
    return Limits(s.sandbox_pids, s.sandbox_memory_mb, s.sandbox_tmp_mb, s.job_dir_mb)


# ---------------------------------------------------------------- cgroups


@dataclass(frozen=True)
class Cgroups:
    """Where the runner makes its stages' cgroups: ``v2`` one folder, ``v1`` one per controller."""

    version: str  # "v2" | "v1"
    parents: dict[str, Path]  # controller -> the folder stage cgroups go under

    def make(self, name: str, limits: Limits) -> StageGroup:
        group = StageGroup(self, {c: p / name for c, p in self.parents.items()})
        try:
            for path in dict.fromkeys(group.dirs.values()):
                path.mkdir()
            _set(group, "pids", "pids.max", limits.pids)
            mem = limits.memory_mb << 20
            _set(group, "memory", "memory.max" if self.version == "v2" else
                 "memory.limit_in_bytes", mem)  # fmt: skip
        except OSError:
            group.remove()
            raise
        return group


def _set(group: StageGroup, controller: str, name: str, value: int) -> None:
    if value and controller in group.dirs:
        (group.dirs[controller] / name).write_text(str(value))


def _own_paths() -> dict[str, str]:
    """This process's cgroup in each hierarchy: ``{"": path}`` for v2, a controller's for v1."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as fh:
        for line in fh:
            _, names, path = line.rstrip("\n").split(":", 2)
            for name in names.split(",") if names else [""]:
                out[name] = path
    return out


def _try_v2(own: dict[str, str]) -> Cgroups | None:
    if not (CGROUP_ROOT / "cgroup.controllers").is_file() or "" not in own:
        return None
    mine = CGROUP_ROOT / own[""].lstrip("/")
    ours = mine / OUR_GROUP
    try:
        have = (mine / "cgroup.controllers").read_text().split()
        if not {"pids", "memory"} <= set(have):
            return None
        ours.mkdir(exist_ok=True)
        # a cgroup that holds processes cannot give controllers to its children but at the root
        for where in (mine, ours):
            if not {"pids", "memory"} <= set(
                (where / "cgroup.subtree_control").read_text().split()
            ):
                (where / "cgroup.subtree_control").write_text("+pids +memory")
    except OSError as exc:
        log.info("event=cgroup_v2_unusable error=%r", exc)
        return None
    return Cgroups("v2", {"pids": ours, "memory": ours})


def _try_v1(own: dict[str, str]) -> Cgroups | None:
    parents: dict[str, Path] = {}
    for controller in ("pids", "memory"):
        top = CGROUP_ROOT / controller
        if controller not in own or not (top / "cgroup.procs").is_file():
            continue
        ours = top / own[controller].lstrip("/") / OUR_GROUP
        try:
            ours.mkdir(exist_ok=True)
        except OSError as exc:
            log.info("event=cgroup_v1_unusable controller=%s error=%r", controller, exc)
            continue
        parents[controller] = ours
    return Cgroups("v1", parents) if parents else None


@functools.cache
def cgroups() -> Cgroups | None:
    """The cgroups this host lets the runner make (root only), tried once."""
    if os.geteuid() != 0:
        return None
    own = _own_paths()
    found = _try_v2(own) or _try_v1(own)
    if found is not None:
        trial = None
        try:  # made and removed once: a read-only cgroupfs (a container's) says no here
            trial = found.make(f"trial-{uuid.uuid4().hex[:8]}", Limits(16, 64, 0, 0))
        except OSError as exc:
            log.info("event=cgroups_unusable error=%r", exc)
            return None
        finally:
            if trial is not None:
                trial.remove()
    return found


@dataclass
class StageGroup:
    cgroups: Cgroups
    dirs: dict[str, Path]

    def join(self) -> None:
        """Put the calling process in the group (``preexec_fn``: system calls only)."""
        for path in dict.fromkeys(self.dirs.values()):
            fd = os.open(path / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, b"0")  # "0" is the writer itself
            finally:
                os.close(fd)

    def hits(self) -> list[str]:
        """The limits the stage ran into: ``pids`` (a fork refused), ``memory`` (an OOM kill)."""
        found = []
        if "pids" in self.dirs and _count(self.dirs["pids"] / "pids.events", "max"):
            found.append("pids")
        if "memory" in self.dirs:
            mem = self.dirs["memory"]
            events = mem / (
                "memory.events" if self.cgroups.version == "v2" else "memory.oom_control"
            )
            if _count(events, "oom_kill"):
                found.append("memory")
        return found

    def kill(self) -> None:
        """Every process still in the group, killed."""
        for path in dict.fromkeys(self.dirs.values()):
            for _ in range(50):
                try:
                    pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)

    def remove(self) -> None:
        self.kill()
        for path in dict.fromkeys(self.dirs.values()):
            for _ in range(500):  # a killed process leaves its cgroup a moment after it dies (10 s)
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        log.warning("event=cgroup_left path=%s error=%r", path, exc)
                        break
                    time.sleep(0.02)


def _count(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


# ---------------------------------------------------------------- one stage's limits


@dataclass
class Applied:
    """The limits one sandboxed process runs under, and what it ran into."""

    limits: Limits
    group: StageGroup | None = None
    nproc: int | None = None  # RLIMIT_NPROC, where no cgroup holds pids
    hit: list[str] = field(default_factory=list)

    def preexec(self) -> Callable[[], None] | None:
        if self.group is None and self.nproc is None:
            return None
        group, nproc = self.group, self.nproc

        def enter() -> None:
            if group is not None:
                group.join()
            if nproc is not None:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

        return enter

    def finish(self) -> None:
        if self.group is not None:
            self.hit += [h for h in self.group.hits() if h not in self.hit]
            self.group.remove()

    def describe_hit(self) -> str:
        """The first limit hit, said as the stage's reason."""
        lim = self.limits
        words = {
            "pids": f"the sandbox's process limit ({lim.pids} processes) was reached",
            "memory": f"the sandbox's memory limit ({lim.memory_mb} MB) was reached",
            "jobdir": f"the job directory's size limit ({lim.job_dir_mb} MB) was reached",
        }
        first = self.hit[0]
        return words.get(first, f"the sandbox's {first} size limit ({lim.tmp_mb} MB) was reached")


@contextlib.contextmanager
def applied(uid_dropped: bool, limits: Limits | None = None) -> Iterator[Applied]:
    """The pids and memory limits of one process (and all it starts), released after it."""
    lim = limits or wanted()
    out = Applied(lim)
    groups = cgroups()
    if groups is not None and (lim.pids or lim.memory_mb):
        try:
            out.group = groups.make(f"stage-{os.getpid()}-{uuid.uuid4().hex[:12]}", lim)
        except OSError as exc:
            log.warning("event=cgroup_failed error=%r", exc)
    if lim.pids and (out.group is None or "pids" not in out.group.dirs) and uid_dropped:
        out.nproc = lim.pids
    try:
        yield out
    finally:
        out.finish()


def in_force(uid_dropped: bool, tmpfs: bool) -> tuple[list[str], list[str]]:
    """(the limits a stage gets here, those this host cannot give), as the report names them."""
    lim, groups = wanted(), cgroups()
    have = set(groups.parents) if groups is not None else set()
    given: list[str] = []
    missing: list[str] = []
    if lim.pids:
        if "pids" in have:
            given.append(f"pids={lim.pids}")
        elif uid_dropped:
            given.append(f"pids={lim.pids}(rlimit)")
        else:
            missing.append("pids")
    if lim.memory_mb:
        (given if "memory" in have else missing).append(
            f"mem={lim.memory_mb}M" if "memory" in have else "mem"
        )
    if lim.tmp_mb:
        (given if tmpfs else missing).append(f"tmp={lim.tmp_mb}M" if tmpfs else "tmp")
    if lim.job_dir_mb:
        given.append(f"jobdir={lim.job_dir_mb}M")
    return given, missing


def describe(uid_dropped: bool, tmpfs: bool) -> str:
    """``limits pids=4096,mem=32768M(cgroup-v1),...``; a missing one follows ``no``."""
    given, missing = in_force(uid_dropped, tmpfs)
    groups = cgroups()
    how = f" by cgroup {groups.version}" if groups is not None else ""
    text = f"limits {','.join(given)}{how}" if given else "no limits"
    return f"{text}; no {','.join(missing)} limit" if missing else text


# ---------------------------------------------------------------- the job directory's size


def size_of(paths: tuple[Path, ...], stop_at: int) -> int:
    """Bytes held (allocated blocks) under ``paths``, links never followed; counting stops past
    ``stop_at``."""
    total = 0
    seen: set[tuple[int, int]] = set()
    stack = [str(p) for p in paths]
    while stack and total <= stop_at:
        top = stack.pop()
        try:
            info = os.lstat(top)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) in seen:
            continue
        seen.add((info.st_dev, info.st_ino))
        total += info.st_blocks * 512
        if os.path.isdir(top) and not os.path.islink(top):
            with contextlib.suppress(OSError), os.scandir(top) as entries:
                stack.extend(e.path for e in entries)
    return total


@dataclass
class Watch:
    """The job directory's cap, measured every ``WATCH_EVERY_S`` as the stage runs."""

    paths: tuple[Path, ...]
    cap_mb: int
    last: float = 0.0

    def over(self) -> bool:
        now = time.monotonic()
        if not self.cap_mb or not self.paths or now - self.last < WATCH_EVERY_S:
            return False
        self.last = now
        cap = self.cap_mb << 20
        return size_of(self.paths, cap) > cap
