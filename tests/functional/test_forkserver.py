"""testkit/processes.py and testkit/forkserver.py: a child forked from the warm server is the
process ``python -m`` would have started (arguments, environment, place, path, streams, exit
status, signals, the ordinary exit), and a start it cannot serve runs as a plain subprocess."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit import processes
from testkit.processes import ROOT, Forked
from testkit.waiting import eventually

CHILD = [sys.executable, "-m", "tests.forkchild"]


@pytest.fixture
def forking(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(processes.ENABLED, "1")
    yield


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def test_a_forked_child_gets_its_arguments_environment_place_streams_and_status(
    forking: None, tmp_path: Path
) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    got = processes.run(
        [*CHILD, "report", "3"],
        env=env(FORKCHILD_X="x-value", PYTHONPATH=f"{extra}{os.pathsep}{ROOT}"),
        cwd=tmp_path,
        input="on stdin",
        text=True,
        timeout=60,
    )
    assert got.returncode == 3, got.stderr
    doc = json.loads(got.stdout)
    assert processes._server is not None
    assert doc.pop("parent") == processes._server.proc.pid  # forked, not started afresh
    assert doc == {
        "argv": ["report", "3"],
        "cwd": str(tmp_path),
        "x": "x-value",
        "path0": str(tmp_path),
        "path1": str(extra),
        "stdin": "on stdin",
        "main": "__main__",
    }
    assert got.stderr == "to stderr\n"  # and no warning about the module being preloaded


def test_signals_reach_the_child_and_its_status_says_which(forking: None) -> None:
    proc = processes.popen([*CHILD, "wait"], env=env(), stdout=subprocess.PIPE, text=True)
    assert isinstance(proc, Forked)
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())
    assert pid == proc.pid and proc.poll() is None
    assert Path(f"/proc/{pid}/cmdline").exists()
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    proc.stdout.close()


def test_the_child_exits_as_an_interpreter_does(forking: None, tmp_path: Path) -> None:
    """Its threads are joined and its atexit handlers run before it ends."""
    out = tmp_path / "left"
    proc = processes.popen([*CHILD, "leave", str(out)], env=env())
    assert isinstance(proc, Forked)
    assert proc.wait(timeout=30) == 0
    assert out.read_text() == "thread\natexit\n"


def test_what_the_server_cannot_serve_runs_as_a_subprocess(forking: None) -> None:
    elsewhere = processes.popen([*CHILD, "report"], env=env(PYTHONPATH="/nonexistent"),
                                 stdin=subprocess.DEVNULL)  # fmt: skip
    not_a_module = processes.popen([sys.executable, "-c", "pass"], env=env())
    for proc in (elsewhere, not_a_module):
        assert isinstance(proc, subprocess.Popen)
        proc.wait(timeout=60)


def test_without_the_switch_every_start_is_a_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(processes.ENABLED, raising=False)
    proc = processes.popen([*CHILD, "report"], env=env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL)  # fmt: skip
    assert isinstance(proc, subprocess.Popen)
    assert proc.wait(timeout=60) == 0


def test_the_server_takes_its_children_with_it_when_its_starter_goes() -> None:
    server = processes.Server()
    proc = server.spawn("tests.forkchild", ["wait"], env=env(), cwd=ROOT, stdin=None,
                        stdout=subprocess.PIPE, stderr=None, text=True)  # fmt: skip
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())
    server.close()  # as the end of the test process does: the server's stdin closes
    eventually(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), timeout=30,
               message="the child is gone")  # fmt: skip
    proc.stdout.close()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (FileNotFoundError, IndexError):
        return True


def test_a_variable_read_at_import_given_another_value_gets_a_fresh_interpreter(
    forking: None, tmp_path: Path
) -> None:
    """core/subjects.py reads FE_CI_EXTRA_SUBJECTS as it is imported: a child that sets it must
    see the subject it adds, which a fork of modules imported without it would not."""
    extension = ROOT / "tests" / "toy_subject"
    assert (extension / "toy_sum_bwd.py").is_file()
    code = ["-m", "cli.main", "configs"]
    plain = processes.run([sys.executable, *code], env=env(), text=True, timeout=120)
    added = processes.run([sys.executable, *code], text=True, timeout=120,
                           env=env(FE_CI_EXTRA_SUBJECTS=str(extension)))  # fmt: skip
    assert plain.returncode == 0 and added.returncode == 0, plain.stderr + added.stderr
    assert "toy_sum_bwd" not in plain.stdout and "toy_sum_bwd" in added.stdout


def test_a_request_without_its_three_streams_is_refused_and_leaves_no_descriptor_open() -> None:
    server = processes.Server()
    try:
        fds = Path(f"/proc/{server.proc.pid}/fd")
        before = len(list(fds.iterdir()))
        for _ in range(5):
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
                conn.settimeout(30)
                conn.connect(server.path)
                request = {"module": "tests.forkchild", "args": [], "env": env(), "cwd": str(ROOT)}
                socket.send_fds(conn, [json.dumps(request).encode()], [1, 2])
                reply = json.loads(conn.recv(4096))
                assert conn.recv(4096) == b""  # the server has closed its end: counted below
            assert "2 descriptors, not 3" in reply["error"]
        assert len(list(fds.iterdir())) == before
        assert server.alive()  # and it still serves a good request
        ok = server.spawn("tests.forkchild", ["report"], env=env(), cwd=ROOT, stdin=None,
                          stdout=subprocess.DEVNULL, stderr=None, text=True)  # fmt: skip
        assert ok.wait(timeout=60) == 0
    finally:
        server.close()
