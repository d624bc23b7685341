"""The init of a candidate's namespaces where bubblewrap is missing (``jail.py``, ``unshare``).

Started as root by ``unshare --pid --fork --mount-proc --mount [--net] --ipc --uts`` with one JSON
argument: ``{"uid", "ro_root", "tmpfs", "tmp_size", "hidden", "ro", "rw", "cwd", "env", "argv",
"report_fd"}``. It is the
new pid namespace's process 1. In its own mount namespace it makes ``/`` read-only (where the
kernel has ``mount_setattr``) with a fresh, writable ``/proc`` (CUDA needs one), mounts an empty
tmpfs on each private and hidden directory, shows
the ``ro`` and ``rw`` paths again (bound through descriptors opened before they were hidden), drops
to the job's uid with no groups, no capabilities and no new privileges, then starts ``argv`` with
exactly ``env`` and waits for it. When it exits, so does every process of the namespace, ``setsid``
or not: the kernel kills them with their init. Its exit status is the command's (a signal ``N``
as ``128 + N``, as bwrap reports it).

Inside bubblewrap (which makes the mounts itself) it runs with no mounts to make, as the reaper
and the reporter: with ``report_fd`` it writes, once the command has ended, which private tmpfs
was full (``tmpfull /dev/shm``) on that descriptor, which the command never inherits.

Standard library only; run with ``python -I -S``.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import sys
from typing import Any

MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC = 0x2, 0x4, 0x8, 0x1000, 0x4000
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY = 0x1
SYS_MOUNT_SETATTR = 442  # the same number on x86_64 and aarch64
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")

libc = ctypes.CDLL(None, use_errno=True)


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    _check(
        libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def read_only(target: str, on: bool) -> None:
    """Set (or clear) the read-only flag of the mounts at and under ``target``."""
    attr = MountAttr(MOUNT_ATTR_RDONLY if on else 0, 0 if on else MOUNT_ATTR_RDONLY, 0, 0)
    ret = libc.syscall(
        SYS_MOUNT_SETATTR,
        AT_FDCWD,
        target.encode(),
        AT_RECURSIVE,
        ctypes.byref(attr),
        ctypes.sizeof(attr),
    )
    _check(ret, f"mount_setattr {target}")


def _mountpoint(target: str, like_dir: bool) -> None:
    if os.path.lexists(target):
        return
    if like_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))


def build_mounts(spec: dict[str, Any]) -> None:
    """The view of the file system the command gets (as root, in the new mount namespace)."""
    shown = [(p, False) for p in spec["ro"]] + [(p, True) for p in spec["rw"]]
    fds = [(p, rw, os.open(p, os.O_PATH), os.path.isdir(p)) for p, rw in shown]
    if spec["ro_root"]:
        read_only("/", True)
        # a fresh /proc of this pid namespace, writable: CUDA fails to start on a read-only one
        # (cudaGetDeviceCount: error 304, seen on the H200 host)
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    size = f",size={spec['tmp_size']}" if spec.get("tmp_size") else ""
    for where in spec["tmpfs"]:
        if os.path.isdir(where):
            mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777" + size)
    for where in spec["hidden"]:  # one under a private /tmp is gone already
        if os.path.isdir(where):
            mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for target, rw, fd, is_dir in fds:  # parents first: a writable child goes over its parent
        _mountpoint(target, is_dir)
        mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC, None)
        if spec["ro_root"] or not rw:
            read_only(target, not rw)
        os.close(fd)


def drop(uid: int | None) -> None:
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # every capability goes with uid 0
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    # gone with unshare, which goes with the runner (set after the uid change, which clears it)
    _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")


def full_tmpfs(tops: tuple[str, ...] = PRIVATE_TMP) -> list[str]:
    """The private tmpfs with (next to) no room left: the candidate ran into their size."""
    out = []
    for where in tops:
        try:
            st = os.statvfs(where)
        except OSError:
            continue
        if st.f_blocks and st.f_bavail * st.f_frsize < max(
            1 << 20, st.f_blocks * st.f_frsize // 100
        ):
            out.append(where)
    return out


def report(fd: int | None) -> None:
    """Which tmpfs was full, on the runner's descriptor (never the command's)."""
    if fd is None:
        return
    try:
        os.write(fd, "".join(f"tmpfull {w}\n" for w in full_tmpfs()).encode() or b"ok\n")
        os.close(fd)
    except OSError:
        pass


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    fd = spec.get("report_fd")
    if fd is not None:
        os.set_inheritable(fd, False)  # the command is never given it
    os.umask(0o022)  # folders made for what is shown again stay searchable
    try:
        build_mounts(spec)
        drop(spec["uid"])
        env = spec["env"]
        program = shutil.which(spec["argv"][0], path=env.get("PATH")) or spec["argv"][0]
    except OSError as exc:
        print(f"fe-ci sandbox: {exc}", file=sys.stderr, flush=True)
        return 125
    child = os.fork()
    if child == 0:
        try:
            if spec["cwd"]:
                os.chdir(spec["cwd"])
            os.execve(program, spec["argv"], env)
        except OSError as exc:
            print(f"fe-ci sandbox: cannot start {program}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)
    while True:  # the init: reap whatever is orphaned here until the command itself ends
        pid, status = os.wait()
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            report(fd)
            return 128 - code if code < 0 else code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
