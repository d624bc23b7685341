"""A warm parent for the CPU stages: imports torch and the dependency layer's heavy modules once,
then forks one child per stage instead of starting a new interpreter each time.

Runs in the candidate's sandbox (``runner/isolation/jail.py``: its own namespaces, a uid of its own)
in an environment that has the dependency layer and the host's torch but **no candidate**: nothing
of any build is ever imported here, so a child starts from dependencies alone and imports its own
build. The parent never touches a GPU (``CUDA_VISIBLE_DEVICES`` is empty before torch is
imported), so forking is safe. It is not dumpable, so a child (same user) cannot attach to it or
read its memory, and it dies with the runner that started it (``PR_SET_PDEATHSIG``, through the
sandbox's own init), so none outlives a killed runner.

Each stage gets namespaces of its own (``isolate``): a user namespace of the same uid, in it new
pid, mount, network, ipc and uts namespaces; the stage runs under an init of its own (process 1
of the new pid namespace), so every process it starts, ``setsid`` or not, ends with it; it gets a
fresh /tmp, /var/tmp and /dev/shm, the zygote's socket folder hidden, and no capability. A host
that refuses these (no unprivileged user namespaces) gets no warm stages: the zygote says so when
it starts (``isolated``) and the runner starts fresh interpreters instead.

Protocol, on a Unix seqpacket socket, one stage per connection: the runner sends one JSON message
with the log file's descriptor attached (``SCM_RIGHTS``):
``{"module", "argv", "env", "cwd", "sites", "python"}``. The parent answers ``{"pid": N}`` with a
pidfd of the child once it exists (its pid is this pid namespace's; the runner stops the stage
through the pidfd, and the stage's namespaces end with the child) and ``{"status": S}`` when it
has ended (an exit code, or minus the signal).

Standard library only (torch is imported, not used).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import runpy
import signal
import site
import socket
import sys
import tempfile
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
MAX_REQUEST = 1 << 20
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 1 << 18
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
TMP_BYTES = 0  # the size of each private tmpfs of a stage (``--tmp-bytes``; 0: the kernel's)
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _call(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def isolate() -> None:
    """This process into namespaces of its own (same uid, seen as itself): user, then pid (for the
    children it forks), mount, network, ipc, uts. Raises OSError where the host refuses them."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    _call(libc.unshare(flags), "unshare")
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # else /proc/self is root's and the maps unwritable
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):  # fmt: skip
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
    finally:
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _mounts_under(tops: tuple[str, ...]) -> list[str]:
    """The mount points strictly under ``tops`` (what the sandbox showed there), outermost only."""
    found: list[str] = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = line.split()[4].encode().decode("unicode_escape")  # "\040" is a space
            if any(point.startswith(t + "/") for t in tops):
                found.append(point)
    found.sort(key=lambda p: (p.count("/"), p))
    return [p for i, p in enumerate(found) if not any(p.startswith(q + "/") for q in found[:i])]


def private_mounts(hidden: list[str], tmp_bytes: int = 0) -> None:
    """A fresh /tmp, /var/tmp and /dev/shm (``tmp_bytes`` each, where given; with what the
    sandbox showed in them shown again), and each ``hidden`` folder emptied, in this mount
    namespace only."""
    sized = b"mode=1777" + (b",size=%d" % tmp_bytes if tmp_bytes else b"")
    _call(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    tops = tuple(t for t in PRIVATE_TMP if os.path.isdir(t))
    kept = [(p, os.open(p, os.O_PATH)) for p in _mounts_under(tops)]
    for where in [*tops, *hidden]:
        flags = MS_NOSUID | MS_NODEV
        data = b"mode=1777" if where in hidden else sized
        _call(libc.mount(b"tmpfs", where.encode(), b"tmpfs", flags, data), where)
        if where in hidden:
            continue
        for point, fd in kept:
            if point.startswith(where + "/"):
                os.makedirs(point, mode=0o755, exist_ok=True)
                source = f"/proc/self/fd/{fd}".encode()
                _call(libc.mount(source, point.encode(), None, MS_BIND | MS_REC, None), point)
    for _, fd in kept:
        os.close(fd)


def drop_capabilities() -> None:
    """None left, none to gain: what ``isolate`` granted in the new user namespace goes."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    _call(libc.capset(ctypes.byref(header), (_CapData * 2)()), "capset")
    _call(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _harden(parent: int | None) -> None:
    """Not dumpable; and gone with whoever started it (the runner, or the sandbox's init, which
    goes with the runner), even one killed with SIGKILL."""
    try:
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except AttributeError:  # not Linux: nothing to harden
        pass
    if parent is not None and os.getppid() != parent:  # the runner died before the line above
        raise SystemExit("zygote: the runner that started it is gone")


def preload(modules: list[str]) -> dict[str, str]:
    """Import what every stage of this layer imports anyway; what fails is only noted."""
    done: dict[str, str] = {}
    for name in modules:
        try:
            importlib.import_module(name)
            done[name] = "ok"
        except (Exception, SystemExit) as exc:
            done[name] = f"{type(exc).__name__}: {exc}"
    return done


def _child(request: dict[str, Any], log_fd: int) -> int:
    """The stage itself, in the forked child: becomes the stage's process as if freshly started."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # tempfile keeps the first answer of gettempdir(): the zygote's, taken while torch and the
    # DSL were imported, a directory this room cannot write. torch's own cache dir comes from
    # it, and a failed first import of torch._dynamo leaves it unimportable for the whole stage.
    tempfile.tempdir = None
    # what the interpreter reads only at start-up, from the stage's environment; the stage's own
    # PYTHONPATH (the runner's candidate-side source) is the same code this process already has
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    for path in request["sites"]:  # the job's environment: the candidate, with its .pth files
        site.addsitedir(path)
    sys.executable = request["python"]  # what the stage would have been started with
    sys.argv = [request["module"], *request["argv"]]
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    return 0


def _in_namespaces(run: Any, hidden: list[str]) -> int:
    """``run()`` in namespaces of its own, under an init of its own: its exit code (minus the
    signal that ended it). Raises OSError where the namespaces cannot be made."""
    isolate()
    read, write = os.pipe()
    init = os.fork()
    if init == 0:  # process 1 of the new pid namespace; its end is every process's in it
        code = 1
        try:
            os.close(read)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            private_mounts(hidden, TMP_BYTES)
            drop_capabilities()
            child = os.fork()
            if child == 0:
                os.close(write)
                code = 1
                try:
                    code = run()
                except BaseException:
                    import traceback

                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            while True:  # reap what is orphaned here until the stage itself ends
                pid, status = os.wait()
                if pid == child:
                    os.write(write, str(os.waitstatus_to_exitcode(status)).encode())
                    code = 0
                    break
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        said = fh.read(32)
    _, status = os.waitpid(init, 0)
    if not said:
        raise OSError(f"the stage's init failed (status {os.waitstatus_to_exitcode(status)})")
    return int(said)


def _exit_as(code: int) -> None:
    """End this process as the stage ended: with its exit code, or by its signal."""
    sys.stdout.flush()
    sys.stderr.flush()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 1)


def _serve_one(srv: socket.socket, conn: socket.socket, hidden: list[str]) -> None:
    msg, fds, _flags, _addr = socket.recv_fds(conn, MAX_REQUEST, 1)
    if len(fds) != 1:
        conn.send(b'{"error": "a request carries exactly one log descriptor"}')
        return
    request = json.loads(msg)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            srv.close()
            conn.close()
            os.setsid()  # leads its own group: the runner stops the stage by it
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            code = _in_namespaces(lambda: _child(request, fds[0]), hidden)
        except BaseException:  # the child must end here, whatever happened
            import traceback

            os.dup2(fds[0], 2)
            traceback.print_exc()
        finally:
            _exit_as(code)
    os.close(fds[0])
    pidfd = os.pidfd_open(pid)  # the runner's handle on it: a pid of ours means nothing there
    try:
        socket.send_fds(conn, [json.dumps({"pid": pid}).encode()], [pidfd])
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    conn.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())


def can_isolate(hidden: list[str]) -> str:
    """Empty where a stage can have namespaces of its own here, else why not (tried at start)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _in_namespaces(lambda: 0, hidden)
        except BaseException as exc:
            print(f"zygote: {exc}", file=sys.stderr, flush=True)
        _exit_as(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return "" if code == 0 else f"a stage cannot have namespaces of its own (status {code})"


# sun_path holds 108 bytes: a deeper socket path is reached through a descriptor of its folder
_SUN_PATH_MAX = 100


def unix_address(sock: socket.socket, path: str, bind: bool) -> None:
    """Bind (or connect) ``sock`` to ``path``, however long: past sun_path's limit, through
    ``/proc/self/fd/N/<name>`` with N a descriptor of the socket's folder."""
    act = sock.bind if bind else sock.connect
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        act(path)
        return
    fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        act(f"/proc/self/fd/{fd}/{os.path.basename(path)}")
    finally:
        os.close(fd)


def serve(sock_path: str, modules: list[str], parent: int | None = None) -> None:
    _harden(parent)
    hidden = [os.path.dirname(os.path.abspath(sock_path))]  # no stage reaches back in here
    why_not = can_isolate(hidden)
    loaded = preload(modules)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    unix_address(srv, sock_path, bind=True)
    srv.listen(4)
    ready = {"ready": True, "pid": os.getpid(), "preloaded": loaded, "isolated": not why_not}
    print(json.dumps({**ready, "why_not": why_not}), flush=True)
    while True:
        conn, _ = srv.accept()
        with conn:
            try:
                _serve_one(srv, conn, hidden)
            except (OSError, ValueError) as exc:  # a runner that went away mid-request
                print(f"zygote: request failed: {exc!r}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--preload", default="torch")
    parser.add_argument("--parent", type=int, default=None, help="the runner's pid")
    parser.add_argument("--tmp-bytes", type=int, default=0, help="each private tmpfs's size")
    args = parser.parse_args(argv)
    global TMP_BYTES
    TMP_BYTES = max(0, args.tmp_bytes)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # children are forked: the parent never starts CUDA
    serve(args.socket, [m for m in args.preload.split(",") if m], args.parent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
