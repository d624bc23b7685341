"""Tokens generated into ``<data_dir>/tokens.env`` (``Settings.with_generated_tokens``): service
processes starting at once on one data directory take turns, so every one holds the tokens the
first one wrote."""

from __future__ import annotations

import fcntl
import os
import platform
import subprocess
import sys
from pathlib import Path

from testkit.service import ROOT
from testkit.waiting import eventually

FLOCK = {"x86_64": "73", "aarch64": "32"}  # the flock system call's number


def in_flock(pid: int) -> bool:
    """The process is blocked in flock(2) (``/proc/<pid>/syscall`` names the call it is in)."""
    return Path(f"/proc/{pid}/syscall").read_text().split()[0] == FLOCK[platform.machine()]


PRINT_TOKEN = (
    "from service.config import Settings; import sys; "
    "print(Settings(data_dir=sys.argv[1]).with_generated_tokens().submit_token)"
)


def test_a_start_waits_for_the_tokens_another_start_is_writing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_")}
    env["PYTHONPATH"] = str(ROOT)
    with open(tmp_path / "tokens.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process is making the tokens
        start = subprocess.Popen(
            [sys.executable, "-c", PRINT_TOKEN, str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        eventually(lambda: in_flock(start.pid), timeout=60, message="the second start waiting")
        # ... and writes them while the second start waits for the lock
        (tmp_path / "tokens.env").write_text("FE_CI_SUBMIT_TOKEN=written-by-the-first-start\n")
    out, _ = start.communicate(timeout=60)
    assert out.strip() == "written-by-the-first-start"
    saved = (tmp_path / "tokens.env").read_text()
    assert "FE_CI_SUBMIT_TOKEN=written-by-the-first-start" in saved
    assert "FE_CI_RUNNER_TOKEN=" in saved  # the others generated once, beside it
