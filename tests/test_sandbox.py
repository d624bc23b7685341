"""Stages run in their own process group: hangs become ``timeout``, signals ``crashed``."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

from runner import sandbox
from tests.helpers import alive


def _script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def test_a_hang_is_killed_with_its_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    cmd = _script(
        tmp_path,
        f"""
        import subprocess, sys, time
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pidfile)!r}, "w").write(str(p.pid))
        print("hanging", flush=True)
        time.sleep(600)
        """,
    )
    out = sandbox.run(cmd, timeout_s=1.5, log_path=tmp_path / "log", grace_s=0.5)
    assert out.status == "timeout"
    assert "hanging" in out.log_tail
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild), "the stage's child outlived the timeout"


def test_death_by_signal_is_crashed_with_the_log_tail(tmp_path: Path) -> None:
    cmd = _script(
        tmp_path,
        """
        import os, signal
        print("about to die", flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
        """,
    )
    out = sandbox.run(cmd, timeout_s=30, log_path=tmp_path / "log")
    assert out.status == "crashed" and out.signal == signal.SIGSEGV
    assert "about to die" in out.log_tail
    assert "SIGSEGV" in out.describe()


def test_nonzero_exit_is_failed_and_zero_is_ok(tmp_path: Path) -> None:
    bad = sandbox.run(
        [sys.executable, "-c", "raise SystemExit(3)"], timeout_s=30, log_path=tmp_path / "a"
    )
    assert bad.status == "failed" and bad.returncode == 3
    good = sandbox.run([sys.executable, "-c", "print('hi')"], timeout_s=30, log_path=tmp_path / "b")
    assert good.ok and "hi" in good.log_tail


def test_cancel_stops_a_running_stage(tmp_path: Path) -> None:
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    cmd = [sys.executable, "-c", "import time; time.sleep(600)"]
    start = time.monotonic()
    out = sandbox.run(cmd, timeout_s=600, log_path=tmp_path / "log", cancel=cancel, grace_s=0.5)
    assert out.status == "cancelled"
    assert time.monotonic() - start < 30


def test_isolated_candidate_cannot_reach_loopback_and_runs_unprivileged(tmp_path: Path) -> None:
    """Runs for real wherever the runner is root (CI is): netns and the uid drop both apply."""
    import socket

    if os.geteuid() != 0:
        import pytest

        pytest.skip("network namespaces and the uid drop need root; CI runs as root")
    assert sandbox.isolation() == "netns,uid"
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    probe = (
        "import os, socket\n"
        f"s = socket.socket(); s.settimeout(3)\n"
        f"try:\n    s.connect(('127.0.0.1', {port})); print('connected')\n"
        "except OSError as e:\n    print('refused', type(e).__name__)\n"
        "print('uid', os.getuid())\n"
    )
    cmd = [sys.executable, "-c", probe]
    loose = sandbox.run(cmd, timeout_s=30, log_path=tmp_path / "loose.log")
    assert "connected" in loose.log_tail and "uid 0" in loose.log_tail  # the control
    boxed = sandbox.run(cmd, timeout_s=30, log_path=tmp_path / "boxed.log", isolate=True)
    assert boxed.ok, boxed.log_tail
    assert "refused" in boxed.log_tail and "connected" not in boxed.log_tail
    assert f"uid {sandbox.UNPRIVILEGED_UID}" in boxed.log_tail
    server.close()


def test_handed_over_dir_is_reachable_under_a_private_parent(tmp_path: Path) -> None:
    """A job directory under a 0700 parent (pytest's own tmp root is one): the candidate,
    unprivileged, must still reach and write it, or every stage fails to import."""
    if not sandbox.drops_privileges():
        import pytest

        pytest.skip("the uid drop needs root; CI runs as root")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    job = private / "jobs" / "job-1"
    sandbox.hand_over(job)
    cmd = [sys.executable, "-c", f"open({str(job / 'ok')!r}, 'w').write('written')"]
    out = sandbox.run(cmd, timeout_s=30, log_path=tmp_path / "log", isolate=True)
    assert out.ok, out.log_tail
    assert (job / "ok").read_text() == "written"
    assert private.stat().st_mode & 0o777 == 0o701  # search only: nothing listed
