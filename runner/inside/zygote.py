"""A warm parent for the CPU stages: imports torch and the dependency layer's heavy modules once,
then forks one child per stage instead of starting a new interpreter each time.

Runs in the candidate's sandbox (network namespace, unprivileged user) in an environment that has
the dependency layer and the host's torch but **no candidate**: nothing of any build is ever
imported here, so a child starts from dependencies alone and imports its own build. The parent
never touches a GPU (``CUDA_VISIBLE_DEVICES`` is empty before torch is imported), so forking is
safe. It is not dumpable, so a child (same user) cannot attach to it or read its memory, and it
dies with the runner that started it (``PR_SET_PDEATHSIG``), so none outlives a killed runner.

Protocol, on a Unix socket, one stage per connection: the runner sends one JSON line with the
log file's descriptor attached (``SCM_RIGHTS``):
``{"module", "argv", "env", "cwd", "sites", "python"}``. The parent answers ``{"pid": N}`` once the
child exists (the child leads its own process group, so the runner can stop it as it stops any
stage) and ``{"status": S}`` when it has ended (an exit code, or minus the signal).

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
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
MAX_REQUEST = 1 << 20


def _harden(parent: int | None) -> None:
    """Not dumpable; and gone with the runner that started it, even one killed with SIGKILL."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to harden
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
    os.setsid()
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


def _serve_one(srv: socket.socket, conn: socket.socket) -> None:
    msg, fds, _flags, _addr = socket.recv_fds(conn, MAX_REQUEST, 1)
    if len(fds) != 1:
        conn.sendall(b'{"error": "a request carries exactly one log descriptor"}\n')
        return
    request = json.loads(msg)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            srv.close()
            conn.close()
            code = _child(request, fds[0])
        except BaseException:  # the child must end here, whatever happened
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(fds[0])
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    _, status = os.waitpid(pid, 0)
    conn.sendall(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode() + b"\n")


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
    loaded = preload(modules)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_address(srv, sock_path, bind=True)
    srv.listen(4)
    print(json.dumps({"ready": True, "pid": os.getpid(), "preloaded": loaded}), flush=True)
    while True:
        conn, _ = srv.accept()
        with conn:
            try:
                _serve_one(srv, conn)
            except (OSError, ValueError) as exc:  # a runner that went away mid-request
                print(f"zygote: request failed: {exc!r}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--preload", default="torch")
    parser.add_argument("--parent", type=int, default=None, help="the runner's pid")
    args = parser.parse_args(argv)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # children are forked: the parent never starts CUDA
    serve(args.socket, [m for m in args.preload.split(",") if m], args.parent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
