"""Stages run in their own process group: hangs become ``timeout``, signals ``crashed``; a
candidate's processes run in the sandbox (``runner/isolation/jail.py``): bubblewrap, or util-linux's
``unshare`` as root, each tried for real where the host has it (CI installs bubblewrap and runs as
root, so both run there), and nothing they start outlives them."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.isolation import jail, limits, sandbox, uids
from testkit.waiting import eventually
from tests.helpers import alive, processes_with, wait_gone


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
    eventually(lambda: not alive(grandchild), timeout=5, interval=0.05,
               message="the stage's child to die with its timeout")  # fmt: skip


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


# ---------------------------------------------------------------- the sandbox


@pytest.fixture(params=["bwrap", "unshare"])
def mechanism(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each way the runner builds a sandbox, where this host allows it (skipped, saying why)."""
    name = str(request.param)
    if name == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap; scripts/setup does)")
    if name == "unshare" and os.geteuid() != 0:
        pytest.skip("the unshare sandbox needs root; CI runs as root")
    monkeypatch.setenv("FE_CI_SANDBOX", name)
    jail.mechanism.cache_clear()
    found = jail.mechanism()
    if found.name != name:
        pytest.skip(f"{name} cannot make its namespaces on this host (got {found.describe()})")
    yield name
    monkeypatch.undo()
    jail.mechanism.cache_clear()
    limits.wanted.cache_clear()


@pytest.fixture
def job(tmp_path: Path) -> Iterator[tuple[Path, int | None]]:
    """A job's writable directory, handed to a uid of the range (where the runner is root)."""
    with uids.UidRange.default().lease() as uid:
        own = tmp_path / "job" / "box"
        uids.hand_over(own, uid)
        jail.make_reachable(own)
        yield own, uid


def _boxed(own: Path, uid: int | None, **kw: object) -> jail.Box:
    """As a job's box is (``jobbox.JobBox.box``): the runner's home hidden, what it needs of it
    (an interpreter installed there, as pyenv does) shown again."""
    hidden = (*kw.pop("hidden", ()), *jail.private_paths())  # type: ignore[misc]
    ro = (own.parent, *jail.runner_paths())
    return jail.Box(uid=uid, rw=(own,), ro=ro, hidden=hidden, cwd=own, **kw)  # type: ignore[arg-type]


def _run(own: Path, uid: int | None, code: str, **kw: object) -> sandbox.Outcome:
    env = {"PATH": os.defpath, "HOME": str(own), "MARK": "given"}
    return sandbox.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        timeout_s=float(kw.pop("timeout_s", 60)),  # type: ignore[arg-type]
        log_path=own.parent / "log",
        env=env,
        grace_s=0.5,
        box=_boxed(own, uid, **kw),
    )


def test_a_setsid_child_dies_with_the_stage(
    mechanism: str, job: tuple[Path, int | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    own, uid = job
    token = "7919.0101"  # a sleep nobody else runs
    # the stage ends only once its child is in a session of its own: until setsid(1) has called
    # setsid(2) it is still in the stage's process group, which the control below kills
    code = f"""
        import os, subprocess, time
        child = subprocess.Popen(['setsid', 'sleep', '{token}'])
        deadline = time.monotonic() + 30
        while os.getsid(child.pid) != child.pid and time.monotonic() < deadline:
            time.sleep(0.005)
        print('left')
    """
    out = _run(own, uid, code)
    assert out.ok and "left" in out.log_tail, out
    wait_gone(lambda: processes_with(token), f"a setsid child of the {mechanism} sandbox")
    # the control: with its process group alone (and no cgroup, whose end takes it too), the
    # same child survives the stage
    monkeypatch.setenv("FE_CI_SANDBOX", "none")
    monkeypatch.setenv("FE_CI_SANDBOX_PIDS", "0")
    monkeypatch.setenv("FE_CI_SANDBOX_MEMORY_MB", "0")
    jail.mechanism.cache_clear()
    limits.wanted.cache_clear()
    out = _run(own, None, code)
    assert out.ok and processes_with(token)
    for pid in processes_with(token):
        os.kill(pid, signal.SIGKILL)


def test_a_timeout_takes_the_whole_sandbox(mechanism: str, job: tuple[Path, int | None]) -> None:
    own, uid = job
    token = "7919.0102"
    code = f"""
        import subprocess, time
        subprocess.Popen(['setsid', 'sleep', '{token}'])
        print('hanging', flush=True)
        time.sleep(600)
    """
    out = _run(own, uid, code, timeout_s=2)
    assert out.status == "timeout" and "hanging" in out.log_tail, out
    wait_gone(lambda: processes_with(token), "the sandbox past its timeout")


def test_death_by_a_signal_in_the_sandbox_is_crashed(
    mechanism: str, job: tuple[Path, int | None]
) -> None:
    own, uid = job
    out = _run(own, uid, "import os, signal; print('dying', flush=True); os.abort()")
    assert out.status == "crashed" and out.signal == signal.SIGABRT, out
    assert "dying" in out.log_tail


def test_the_candidate_sees_its_allowlist_no_network_and_only_its_own_directory_writable(
    mechanism: str, job: tuple[Path, int | None], tmp_path: Path
) -> None:
    own, uid = job
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    private = tmp_path / "runner-private"
    private.mkdir()
    (private / "tokens.env").write_text("FE_CI_RUNNER_TOKEN=x\n")
    outside = Path("/tmp") / f"fe-ci-outside-{os.getpid()}"
    outside.write_text("the host's /tmp")
    code = f"""
        import os, socket
        print('env', sorted(os.environ))
        print('uid', os.getuid())
        s = socket.socket(); s.settimeout(3)
        try:
            s.connect(('127.0.0.1', {port})); print('connected')
        except OSError as e:
            print('refused', type(e).__name__)
        print('host tmp', os.path.exists({str(outside)!r}))
        print('private', os.path.exists({str(private / "tokens.env")!r}))
        open('/proc/self/comm', 'w').write('candidate')  # CUDA needs a writable /proc
        print('proc', open('/proc/self/comm').read().strip())
        for where in ({str(own.parent / "planted")!r}, '/usr/planted', {str(own / "mine")!r}):
            try:
                open(where, 'w').write('x'); print('wrote', where)
            except OSError as e:
                print('refused', where, e.strerror)
    """
    try:
        out = _run(own, uid, code, hidden=(private,))
    finally:
        outside.unlink()
        server.close()
    assert out.ok, out.log_tail
    tail = out.log_tail
    assert "env ['HOME', 'LC_CTYPE', 'MARK', 'PATH'" in tail  # LC_CTYPE: Python's own (PEP 538)
    assert "\nrefused " in tail and "connected" not in tail  # not even the host's loopback
    assert "host tmp False" in tail and "private False" in tail and "proc candidate" in tail
    assert f"wrote {own / 'mine'}" in tail
    assert f"refused {own.parent / 'planted'}" in tail and "refused /usr/planted" in tail
    if uid is not None:  # the runner is root (CI is): the job's uid, on the host too
        assert f"uid {uid}" in tail and (own / "mine").stat().st_uid == uid


def test_layers_are_named_and_a_missing_one_is_named_too() -> None:
    full = jail.Mechanism("bwrap", (*jail.STAGE_LAYERS, "uid"))
    assert full.describe() == "bwrap:pid,net,ipc,uts,mnt,tmp,ro,uid"
    rootless = jail.Mechanism("bwrap", (*jail.STAGE_LAYERS, "user"))
    assert rootless.describe() == "bwrap:pid,net,ipc,uts,mnt,tmp,ro,user; missing uid"
    assert jail.Mechanism("pgroup", ()).describe() == (
        "pgroup; missing pid,net,ipc,uts,mnt,tmp,ro,uid"
    )


# ---------------------------------------------------------------- the uids


def test_a_job_uid_is_its_own_until_released_and_then_goes_round(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a runner that is root runs candidates as another uid; CI runs as root")
    span = uids.UidRange(300_000, 3, tmp_path / "locks")
    with span.lease() as a, span.lease() as b:
        assert {a, b} <= {300_000, 300_001, 300_002} and a != b
        with span.lease() as c:
            assert c not in (a, b)
            with pytest.raises(uids.NoFreeUid), span.lease():
                pass
    with span.lease() as d:
        assert d == 300_000  # in turn: after the last one given, round again


def test_a_uid_given_back_takes_its_processes_with_it(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a runner that is root runs candidates as another uid; CI runs as root")
    token = "7919.0103"
    with uids.UidRange(300_100, 2, tmp_path / "locks").lease() as uid:
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "setsid", "--fork"]
        sleeper = subprocess.Popen([*cmd, "sleep", token])
        sleeper.wait()  # setsid forks: the sleep is an orphan now
        assert processes_with(token)
    wait_gone(lambda: processes_with(token), "the processes of the uid given back")


def test_taking_back_makes_the_tree_the_runners_without_set_id_bits(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing owners needs root; CI runs as root")
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    runners = tree / "linked-entry"
    runners.write_text("the runner's")
    runners.chmod(0o444)
    uids.hand_over_tree(tree, 300_200)
    assert (tree / "d").stat().st_uid == 300_200 and runners.stat().st_uid == 0  # files stay
    tool = tree / "d" / "tool"
    tool.write_text("#!/bin/sh\n")
    os.chown(tool, 300_200, 300_200)
    tool.chmod(0o6755)
    (tree / "d" / "link").symlink_to("/etc/passwd")
    uids.take_back(tree)
    assert {p.lstat().st_uid for p in [tree, *tree.rglob("*")]} == {0}
    assert tool.stat().st_mode & 0o7777 == 0o755
    assert Path("/etc/passwd").stat().st_uid == 0  # the link changed, not what it points at


def test_handed_over_dir_is_reachable_under_a_private_parent(tmp_path: Path) -> None:
    """A job directory under a 0700 parent (pytest's own tmp root is one): the candidate, as the
    job's uid, must still reach and write it, or every stage fails to import."""
    if not jail.mechanism().uid_drop:
        pytest.skip("running as the job's uid needs root; CI runs as root")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    with uids.UidRange.default().lease() as uid:
        own = private / "jobs" / "job-1"
        uids.hand_over(own, uid)
        jail.make_reachable(own)
        box = jail.Box(uid=uid, rw=(own,), ro=jail.runner_paths(), cwd=own)
        cmd = [sys.executable, "-c", f"open({str(own / 'ok')!r}, 'w').write('written')"]
        env = {"PATH": os.defpath}
        out = sandbox.run(cmd, timeout_s=30, log_path=tmp_path / "log", env=env, box=box)
    assert out.ok, out.log_tail
    assert (own / "ok").read_text() == "written"
    assert private.stat().st_mode & 0o777 == 0o701  # search only: nothing listed
