"""README's first steps, as a new user runs them, in a fresh copy: ``./scripts/quickstart``, then
``fe-ci`` on the PATH as it says, ``fe-ci submit WHEEL --wait --timeout``, and the stop command.

The copy holds the project's files (tracked, and untracked ones git does not ignore) and nothing
else: no ``.venv``, no ``data``. Quickstart sets everything up, starts the service on SQLite and a
runner that keeps taking jobs, and follows a real nvidia-cudnn-frontend wheel from the package
registry to its verdict; the README's next command gets a second verdict from the same service
and runner with no hand step, and its stop command leaves no process behind. System packages are
left alone (``FE_CI_SETUP_SYSTEM=0``): the test suite's own setup has already installed them.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from testkit.service import ROOT, free_port

pytestmark = pytest.mark.slow  # sets up a fresh .venv and installs a registry wheel


def fresh_copy(dest: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        src = ROOT / name
        if not src.is_file():  # deleted in the working tree
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name)
    return dest


def first_steps(readme: str) -> list[str]:
    """The commands of the README's first code block that ends with quickstart's stop, in
    order, without their comments."""
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    block = next(b for b in blocks if "./scripts/quickstart stop" in b)
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def left_running(repo: Path) -> list[str]:
    """Every process whose command line or working directory is in the copy."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(proc / "cwd")
        except OSError:  # gone, or not ours to read
            continue
        if str(repo) in cmdline or cwd.startswith(str(repo)):
            found.append(f"{proc.name}: {cmdline}")
    return found


def test_the_readme_first_steps_on_a_fresh_copy(tmp_path: Path) -> None:
    repo = fresh_copy(tmp_path / "fe-ci")
    assert not (repo / ".venv").exists() and not (repo / "data").exists()
    commands = first_steps((repo / "README.md").read_text())
    assert commands[0] == "./scripts/quickstart" and commands[-1] == "./scripts/quickstart stop"
    assert any(c.startswith("fe-ci submit ") and "--wait" in c for c in commands), commands
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FE_CI_", "VIRTUAL_ENV"))}
    env.pop("PYTHONPATH", None)
    env.update(
        FE_CI_PORT=str(port),
        FE_CI_URL=f"http://127.0.0.1:{port}",  # as the README says where FE_CI_PORT is set
        FE_CI_SETUP_SYSTEM="0",
        FE_CI_CACHE_DIR=str(tmp_path / "cache"),  # this runner's own state, not the user's
        PATH=env["PATH"],
    )
    # each command as the README has it, in one shell (the export carries on), its status said
    script = "".join(f"{c}\nprintf 'exit %s <- %s\\n' $? {shlex.quote(c)}\n" for c in commands)
    proc = subprocess.run(
        ["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=1500
    )
    out = proc.stdout + proc.stderr
    print(out)  # the timings of each step, for the README's figure (pytest -rA shows them)
    statuses = dict(
        (m.group(2), int(m.group(1))) for m in re.finditer(r"^exit (\d+) <- (.*)$", out, re.M)
    )
    assert list(statuses) == commands, out[-4000:]
    # no GPU here: each build ends incomplete (2), the probe ran and the GPU subjects did not
    assert statuses == {c: 2 if c.startswith("fe-ci submit") else 0 for c in commands}, out[-4000:]
    for n in range(1, 6):  # progress while it works: a step counter, and pip's packages
        assert f"quickstart: [{n}/5] " in out, out[-4000:]
    assert "install:   " in out  # each package pip fetched or installed
    assert out.count("verdict: incomplete") == 2, out[-4000:]
    assert "did not run:" in out  # every subject that did not run, on the verdict's screen
    assert f'export PATH="{repo}/.venv/bin:$PATH"' in out  # what the README then types
    assert "stop both: ./scripts/quickstart stop" in out
    assert "stopped the runner" in out and "stopped the service" in out
    assert left_running(repo) == []
    with sqlite3.connect(repo / "data" / "fe-ci.sqlite3") as db:
        builds = db.execute("SELECT id, source, version, verdict FROM builds").fetchall()
        stages = db.execute("SELECT name, status FROM stages").fetchall()
        runners = db.execute("SELECT offline_at IS NOT NULL FROM runners").fetchall()
    assert builds == [(1, "wheel", "1.32.0", "incomplete"), (2, "wheel", "1.32.0", "incomplete")]
    assert ("install", "pass") in stages and ("probe", "pass") in stages, stages
    assert runners == [(1,)]  # one runner took both jobs, and went offline when stopped
    # the tokens it generated are kept for the next start
    assert "FE_CI_SUBMIT_TOKEN=" in (repo / "data" / "tokens.env").read_text()

    # QUICKSTART_EXIT=1: everything stops at the end, and the exit is the verdict's
    again = subprocess.run(
        ["./scripts/quickstart"], cwd=repo, env={**env, "QUICKSTART_EXIT": "1"},
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert again.returncode == 2, (again.stdout + again.stderr)[-4000:]
    assert "verdict: incomplete" in again.stdout
    assert left_running(repo) == []

    # scripts/install put numpy beside torch (torch's wheel does not require it), so torch
    # imports without "Failed to initialize NumPy"
    imported = subprocess.run(
        [repo / ".venv" / "bin" / "python", "-c", "import torch, numpy; print(numpy.__file__)"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert imported.returncode == 0 and imported.stderr.strip() == "", imported.stderr
    assert imported.stdout.startswith(str(repo / ".venv")), imported.stdout
