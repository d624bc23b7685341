"""The sandbox a candidate's processes run in, and how this host builds it.

Three ways, the first this host allows (``FE_CI_SANDBOX``: ``auto``, ``bwrap``, ``unshare``,
``pgroup``; ``none`` = ``pgroup`` without a uid):

- ``bwrap`` (bubblewrap): an empty environment plus the allowlist (``--clearenv``, ``--setenv``),
  new pid, network, ipc, uts, mount and user namespaces (``--unshare-all``), ``--die-with-parent``
  and ``--new-session``; ``/`` bound read-only, a fresh ``/proc`` and ``/dev`` (with the GPU's
  device nodes), private ``/tmp``, ``/var/tmp`` and ``/dev/shm``, the runner's private directories
  hidden, and only the job's own directories writable. A runner that is root starts bwrap as the
  job's uid (``setpriv``), so the candidate's files are that uid's on the host.
- ``unshare`` (util-linux, root only, where bwrap is missing or cannot start): new pid, mount,
  network, ipc and uts namespaces, ``runner/isolation/nsinit.py`` as their init (root makes the same
  mounts, then drops to the job's uid and starts the command).
- ``pgroup``: its own process group only, as the job's uid where the runner is root.

In the first two a process the candidate starts, ``setsid`` or not, dies with the stage: the pid
namespace's init takes every process of it along. ``describe`` says which layers are in force and
names the missing ones, for the report's ``sandbox``.
"""

from __future__ import annotations

import functools
import glob
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from runner.config import RunnerSettings
from runner.isolation import limits

log = logging.getLogger("fe_ci.sandbox")

# What a candidate's sandbox should have; ``user`` (a user namespace) is how bwrap builds them
# without root, and is named where it is used, but is no layer of its own.
LAYERS = ("pid", "net", "ipc", "uts", "mnt", "tmp", "ro", "uid")
STAGE_LAYERS = ("pid", "net", "ipc", "uts", "mnt", "tmp", "ro")
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
NSINIT = Path(__file__).with_name("nsinit.py")
TRIAL_UID = 65534  # only for trying whether a uid can be dropped to; never a job's


@dataclass(frozen=True)
class Box:
    """What one sandboxed command may see and write, and as whom it runs."""

    uid: int | None = None  # the job's uid (None: the runner's own)
    rw: tuple[Path, ...] = ()  # the only writable places: the job's own directories
    ro: tuple[Path, ...] = ()  # shown read-only even under a private /tmp or a hidden directory
    hidden: tuple[Path, ...] = ()  # replaced by an empty directory (the runner's private ones)
    network: bool = False  # installers reach the package index; stages never
    cwd: Path | None = None


@dataclass(frozen=True)
class Mechanism:
    name: str  # bwrap | unshare | pgroup
    layers: tuple[str, ...]
    prefix: tuple[str, ...] = ()  # the tool (bwrap, unshare) or nothing
    uid_drop: bool = False
    ro_root: bool = False

    @property
    def namespaces(self) -> bool:
        return self.name in ("bwrap", "unshare")

    def describe(self) -> str:
        """``bwrap:pid,net,ipc,uts,mnt,user,tmp,ro,uid``; a missing layer follows ``missing``."""
        text = self.name + (":" + ",".join(self.layers) if self.layers else "")
        missing = [name for name in LAYERS if name not in self.layers]
        return f"{text}; missing {','.join(missing)}" if missing else text

    def wrap(
        self, cmd: list[str], env: dict[str, str], box: Box, report_fd: int | None = None
    ) -> Launch:
        """How to start ``cmd`` in ``box`` with exactly ``env``. With ``report_fd`` (a pipe's
        end, passed to the sandbox), the sandbox's init writes there which private tmpfs was
        full when the command ended (``nsinit.py``); the candidate never holds it."""
        uid = box.uid if self.uid_drop else None
        tmp_size = limits.wanted().tmp_bytes
        if self.name == "bwrap":  # as root it makes the mounts, then setpriv drops to the uid
            inner = [*_drop(uid), *cmd]
            if report_fd is not None:  # nsinit as a plain reaper and reporter, no mounts
                plain = {**_NO_MOUNTS, "env": env, "argv": inner, "report_fd": report_fd}
                inner = [sys.executable, "-I", "-S", "-c", _nsinit_source(), json.dumps(plain)]
            argv = _bwrap(self.prefix, inner, env, box, tmp_size)
            return Launch(argv, {"PATH": os.defpath})
        if self.name == "unshare":
            shown = _shown(box)
            spec: dict[str, Any] = {
                "uid": uid,
                "ro_root": self.ro_root,
                "tmpfs": list(PRIVATE_TMP),
                "tmp_size": tmp_size,
                "report_fd": report_fd,
                "hidden": shown.hidden,
                "ro": shown.ro,
                "rw": shown.rw,
                "cwd": str(box.cwd) if box.cwd else None,
                "env": env,
                "argv": cmd,
            }
            argv = [*self.prefix, *([] if box.network else ["--net"])]
            argv += ["--", sys.executable, "-I", "-S", str(NSINIT), json.dumps(spec)]
            return Launch(argv, {"PATH": os.defpath})
        return Launch([*_drop(uid), *cmd], env)


_NO_MOUNTS: dict[str, Any] = {
    **{"uid": None, "ro_root": False, "cwd": None},
    **{key: [] for key in ("tmpfs", "hidden", "ro", "rw")},
}


@functools.cache
def _nsinit_source() -> str:
    """``nsinit.py`` as ``-c`` code: the runner's own files may be hidden inside the sandbox."""
    return NSINIT.read_text()


@dataclass(frozen=True)
class Launch:
    """A command as the sandbox starts it: its argv and the environment of that argv."""

    argv: list[str]
    env: dict[str, str]


def _drop(uid: int | None) -> list[str]:
    setpriv = shutil.which("setpriv") or "setpriv"
    if uid is None:
        return []
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--"]


def _existing(paths: tuple[Path, ...]) -> list[str]:
    out = []
    for p in paths:
        s = os.path.abspath(p)
        if os.path.exists(s) and s not in out:
            out.append(s)
    return sorted(out, key=lambda s: (s.count("/"), s))  # a parent before what it holds


class _Shown(NamedTuple):
    hidden: list[str]
    ro: list[str]
    rw: list[str]


def _shown(box: Box) -> _Shown:
    hidden = [p for p in _existing(box.hidden) if os.path.isdir(p)]
    return _Shown(hidden, _existing(box.ro), _existing(box.rw))


def _between(tops: tuple[str, ...], path: str) -> list[str]:
    """The folders strictly between the deepest of ``tops`` holding ``path`` and ``path``."""
    holders = [t for t in tops if path.startswith(t.rstrip("/") + "/")]
    if not holders:
        return []
    top = max(holders, key=len)
    parts = Path(path).relative_to(top).parts[:-1]
    return [str(Path(top, *parts[: i + 1])) for i in range(len(parts))]


def gpu_devices() -> list[str]:
    """The NVIDIA device nodes (and the capabilities folder) this host has."""
    return sorted(glob.glob("/dev/nvidia*"))


def _bwrap(
    prefix: tuple[str, ...], cmd: list[str], env: dict[str, str], box: Box, tmp_size: int | None
) -> list[str]:
    argv = [*prefix, *([] if box.network else ["--unshare-net"])]
    argv += ["--die-with-parent", "--new-session", "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for node in gpu_devices():
        argv += ["--dev-bind", node, node]
    shown = _shown(box)
    for where in PRIVATE_TMP:
        argv += ["--perms", "1777", *(["--size", str(tmp_size)] if tmp_size else [])]
        argv += ["--tmpfs", where]
    for where in shown.hidden:
        argv += ["--perms", "0755", "--tmpfs", where]
    # what is shown again under an empty directory needs its folders made there, searchable
    empty = (*PRIVATE_TMP, *shown.hidden)
    for where in dict.fromkeys(a for p in [*shown.ro, *shown.rw] for a in _between(empty, p)):
        argv += ["--perms", "0755", "--dir", where]
    for where in shown.ro:
        argv += ["--ro-bind", where, where]
    for where in shown.rw:
        argv += ["--bind", where, where]
    if box.cwd is not None:
        argv += ["--chdir", str(box.cwd)]
    return [*argv, "--", *cmd]


# ---------------------------------------------------------------- what this host allows


def _works(launch: Launch) -> bool:
    try:
        done = subprocess.run(launch.argv, env=launch.env, capture_output=True, timeout=30)
        return done.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def runner_paths() -> tuple[Path, ...]:
    """What every sandboxed process reads of the runner: its interpreter and its installation
    (a candidate environment's ``python`` links to it; installers are its pip and uv)."""
    exe = Path(os.path.realpath(sys.executable))
    return tuple(dict.fromkeys([exe.parent, Path(sys.base_prefix), Path(sys.prefix)]))


def private_paths() -> tuple[Path, ...]:
    """What no candidate sees of the host: the home of the user the runner runs as (its caches,
    a tool's credentials); what a stage needs of it is shown again read-only."""
    home = Path.home()
    return (home,) if home != Path("/") else ()


def _trial(m: Mechanism) -> bool:
    box = Box(uid=TRIAL_UID, ro=runner_paths(), hidden=private_paths(), cwd=Path("/"))
    return _works(m.wrap([sys.executable, "-I", "-S", "-c", "pass"], {"PATH": os.defpath}, box))


def _bwrap_mechanism(root: bool) -> Mechanism | None:
    """As root, bwrap makes the namespaces and mounts and ``setpriv`` inside drops to the job's uid
    (a user namespace would add nothing to a uid without capabilities); otherwise bwrap builds
    them in a user namespace of the runner's own uid."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    spaces = ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try")
    if root:
        if not shutil.which("setpriv"):
            return None
        m = Mechanism("bwrap", (*STAGE_LAYERS, "uid"), (bwrap, *spaces), uid_drop=True)
    else:
        m = Mechanism("bwrap", (*STAGE_LAYERS, "user"), (bwrap, "--unshare-user", *spaces))
    return m if _trial(m) else None


def _unshare_mechanism(root: bool) -> Mechanism | None:
    unshare = shutil.which("unshare")
    if unshare is None or not root:
        return None
    # gone with the runner (setpriv's parent-death signal), and its init with it (--kill-child)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix: tuple[str, ...] = (setpriv, "--pdeathsig", "KILL", "--", unshare, "--pid", "--fork")
    prefix += ("--mount-proc", "--mount", "--ipc", "--uts", "--kill-child=SIGKILL")
    layers = ("pid", "net", "ipc", "uts", "mnt", "tmp")
    for ro in (True, False):  # a read-only root needs mount_setattr (Linux 5.12)
        m = Mechanism("unshare", (*layers, *(["ro"] if ro else []), "uid"), prefix, True, ro)
        if _trial(m):
            return m
    return None


def _pgroup_mechanism(root: bool, drop: bool = True) -> Mechanism:
    if drop and root and shutil.which("setpriv"):
        m = Mechanism("pgroup", ("uid",), uid_drop=True)
        if _trial(m):
            return m
    return Mechanism("pgroup", ())


@functools.cache
def mechanism() -> Mechanism:
    """The strongest sandbox this host allows (or the one ``FE_CI_SANDBOX`` names), tried once."""
    wanted = RunnerSettings().sandbox
    root = os.geteuid() == 0
    if wanted == "none":
        return _pgroup_mechanism(root, drop=False)
    found = None
    if wanted in ("auto", "bwrap"):
        found = _bwrap_mechanism(root)
    if found is None and wanted in ("auto", "unshare"):
        found = _unshare_mechanism(root)
    if found is None:
        found = _pgroup_mechanism(root)
    if wanted not in ("auto", found.name):
        log.warning("event=sandbox_unavailable wanted=%s using=%s", wanted, found.describe())
    log.info("event=sandbox mechanism=%s", found.describe())
    return found


def isolation() -> str:
    """The isolation applied to candidate processes and its limits, stated honestly for the
    report."""
    m = mechanism()
    return f"{m.describe()}; {limits.describe(m.uid_drop, m.namespaces)}"


def make_reachable(path: Path) -> None:
    """Grant search (``o+x``, never listing) on each ancestor of ``path`` that withholds it.

    A job directory under a private parent (``/tmp/pytest-of-root`` is 0700, so is a root
    home) would leave the candidate, running as the job's uid, unable to reach its own
    environment, and it would fail with a misleading ``No module named ...``.
    """
    if not mechanism().uid_drop:
        return
    for parent in Path(os.path.abspath(path)).parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(parent, stat.S_IMODE(mode) | stat.S_IXOTH)
            log.info("granted search permission on %s so the sandboxed candidate can reach %s",
                     parent, path)  # fmt: skip
