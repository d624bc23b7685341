"""Every command's ``--help`` names the environment it reads: each command runs for real (in a
subprocess, on real files, a real git repository and a real service on 127.0.0.1) with its runner
settings recording which of them it read, and each one read must be named in its help. The
service's settings are held to the list ``serve --help`` names; ``FE_CI_EXTRA_SUBJECTS``, read
when the subjects are first imported, is named by every command and shown to matter."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli import environment
from testkit import processes
from testkit.service import ROOT, Service, free_port
from testkit.wheels import make_wheel

# The command, run with RunnerSettings replaced by a subclass that notes each setting read.
RECORDING = """
import atexit, json, os, sys
from typing import Any
import cli.common
from runner.config import RunnerSettings
READ: set[str] = set()
class Recording(RunnerSettings):
    def __getattribute__(self, name: str) -> Any:
        if name in RunnerSettings.model_fields:
            READ.add(name)
        return super().__getattribute__(name)
cli.common.RunnerSettings = Recording
atexit.register(lambda: open(os.environ["RECORD_TO"], "w").write(json.dumps(sorted(READ))))
sys.argv[0] = "fe-ci"
from cli.main import main
main()
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_") and k != "COLUMNS"}
    env.update({"PYTHONPATH": str(ROOT), "FE_CI_RUNNER_LABELS": ""}, **extra)
    return env


def _help_names(command: str, cwd: Path) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", command, "--help"],
        cwd=cwd, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return set(re.findall(r"FE_CI_[A-Z0-9_]+", proc.stdout))


def _read_by(args: list[str], cwd: Path, **extra: str) -> tuple[set[str], int, str]:
    record = cwd / "read.json"
    proc = subprocess.run(
        [sys.executable, "-c", RECORDING, *args],
        cwd=cwd, env=_env(RECORD_TO=str(record), **extra), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    return set(json.loads(record.read_text())), proc.returncode, proc.stderr


def _git_repo(path: Path) -> Path:
    path.mkdir()
    for n, text in enumerate(("a", "b")):
        (path / "f").write_text(text)
        for cmd in (["git", "init", "-q"] if n == 0 else []), ["git", "add", "f"]:
            if cmd:
                subprocess.run(cmd, cwd=path, check=True)
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", text],
            cwd=path, check=True,
        )  # fmt: skip
    return path


@pytest.mark.parametrize("command", ["submit", "pin", "runner", "validate", "bisect", "configs"])
def test_every_setting_a_command_reads_is_named_in_its_help(
    command: str, tmp_path: Path, module_service: Service
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "tokens.env").write_text("FE_CI_SUBMIT_TOKEN=x\nFE_CI_ADMIN_TOKEN=y\n")
    away = f"http://127.0.0.1:{free_port()}"
    cases: dict[str, tuple[list[str], dict[str, str], int]] = {
        "submit": (
            ["submit", str(make_wheel(tmp_path, "1.32.0", "")), "--wait", "--timeout", "1"],
            {"FE_CI_URL": away, "FE_CI_DATA_DIR": str(data)},
            3,
        ),
        "pin": (
            ["pin", "sdpa_bwd", "b0", "--family", "sm_90"],
            {"FE_CI_URL": away, "FE_CI_DATA_DIR": str(data)},
            3,
        ),
        "runner": (
            ["runner", "--once"],
            {
                "FE_CI_URL": module_service.url,
                "FE_CI_RUNNER_TOKEN": "wrong",
                "FE_CI_CACHE_DIR": str(tmp_path / "cache"),
                "FE_CI_WARM_WORKERS": "0",
            },
            3,
        ),
        "validate": (
            ["validate", "--preinstalled", "--python", "/bin/false", "--stages", "probe"],
            {"FE_CI_CACHE_DIR": str(tmp_path / "cache")},
            1,  # the probe could not run that Python: error
        ),
        "bisect": (
            ["bisect", "HEAD~1", "HEAD", "--repo", str(_git_repo(tmp_path / "repo"))],
            {"FE_CI_CACHE_DIR": str(tmp_path / "cache"), "FE_CI_WARM_WORKERS": "0"},
            1,  # no frontend builds from it: nothing turned red
        ),
        "configs": (["configs", "sdpa_bwd"], {}, 0),
    }
    args, extra, code = cases[command]
    read, returncode, stderr = _read_by(args, tmp_path, **extra)
    assert returncode == code, stderr[-3000:]
    named = _help_names(command, tmp_path)
    missing = {environment.var(f) for f in read} - named
    assert not missing, (command, sorted(missing))
    assert environment.names(command) <= named  # the help says what environment.py lists
    if command != "configs":
        assert read, command  # it ran far enough to read its settings
    assert "FE_CI_EXTRA_SUBJECTS" in named


def test_serve_names_every_setting_of_the_service(tmp_path: Path) -> None:
    from service.config import Settings

    assert set(environment.SERVICE) == set(Settings.model_fields)
    named = _help_names("serve", tmp_path)
    assert {environment.var(f) for f in Settings.model_fields} <= named


def test_every_command_reads_the_extra_subjects(tmp_path: Path) -> None:
    """FE_CI_EXTRA_SUBJECTS is read as the subjects are imported, by every command: a path that
    is not there stops even ``configs``, naming the variable."""
    proc = processes.run(
        [sys.executable, "-m", "cli.main", "configs"], cwd=tmp_path,
        env=_env(FE_CI_EXTRA_SUBJECTS=str(tmp_path / "missing")), text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0 and "FE_CI_EXTRA_SUBJECTS" in proc.stderr, proc.stderr
