"""A kept candidate environment whose host-torch path names a directory that is gone (the venv
that made it was deleted) is pointed at the host's torch again, instead of failing every stage
with ``No module named 'torch'``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runner.envs import envs


def _imports_torch(env: envs.CandidateEnv) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(env.python), "-c", "import torch; print(torch.__file__)"],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_kept_env_whose_torch_path_is_gone_imports_torch_again(tmp_path: Path) -> None:
    env = envs.create_env(tmp_path / "env")
    pth = env.site_packages() / envs.HOST_TORCH_PTH
    if not pth.exists():
        pytest.skip("the host's torch is on the venv's own path: no kept path can go stale")
    pth.write_text(f"{tmp_path / 'deleted-venv' / 'site-packages'}\n")
    assert "No module named 'torch'" in _imports_torch(env).stderr

    envs.repoint_host_torch(env)

    assert _imports_torch(env).returncode == 0
    assert Path(pth.read_text().strip()).is_dir()


def test_a_kept_env_that_sees_torch_is_left_alone(tmp_path: Path) -> None:
    env = envs.create_env(tmp_path / "env")
    pth = env.site_packages() / envs.HOST_TORCH_PTH
    before = pth.read_text() if pth.exists() else None
    envs.repoint_host_torch(env)
    assert (pth.read_text() if pth.exists() else None) == before
    assert _imports_torch(env).returncode == 0
