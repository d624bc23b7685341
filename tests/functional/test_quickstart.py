"""README's first command, as a new user runs it: ``./scripts/quickstart`` in a fresh copy.

The copy holds the project's files (tracked, and untracked ones git does not ignore) and nothing
else: no ``.venv``, no ``data``. Quickstart sets everything up, starts the service on SQLite, has a
local runner take a real nvidia-cudnn-frontend wheel from the package registry, and (with
``QUICKSTART_EXIT=1``) stops. System packages are left alone (``FE_CI_SETUP_SYSTEM=0``): the
test suite's own setup has already installed them.
"""

from __future__ import annotations

import os
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


def test_quickstart_sets_up_runs_a_registry_wheel_and_shows_it(tmp_path: Path) -> None:
    repo = fresh_copy(tmp_path / "fe-ci")
    assert not (repo / ".venv").exists() and not (repo / "data").exists()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FE_CI_", "VIRTUAL_ENV"))}
    env.pop("PYTHONPATH", None)
    env.update(QUICKSTART_EXIT="1", FE_CI_PORT=str(port), FE_CI_SETUP_SYSTEM="0")
    proc = subprocess.run(
        ["./scripts/quickstart"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert f"dashboard: http://127.0.0.1:{port}/" in out
    assert "verdict: incomplete" in out  # no GPU here: the probe ran, the GPU subjects did not
    with sqlite3.connect(repo / "data" / "fe-ci.sqlite3") as db:
        builds = db.execute("SELECT id, source, version, verdict FROM builds").fetchall()
        stages = dict(db.execute("SELECT name, status FROM stages").fetchall())
    assert builds == [(1, "wheel", "1.32.0", "incomplete")]
    assert stages["install"] == "pass" and stages["probe"] == "pass", stages
    # the tokens it generated are kept for the next start
    assert "FE_CI_SUBMIT_TOKEN=" in (repo / "data" / "tokens.env").read_text()
    # scripts/install put numpy beside torch (torch's wheel does not require it), so torch
    # imports without "Failed to initialize NumPy"
    imported = subprocess.run(
        [repo / ".venv" / "bin" / "python", "-c", "import torch, numpy; print(numpy.__file__)"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert imported.returncode == 0 and imported.stderr.strip() == "", imported.stderr
    assert imported.stdout.startswith(str(repo / ".venv")), imported.stdout
