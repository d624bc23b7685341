"""Real frontend wheels from the package registry, cached so repeated runs do not re-download."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runner import envs

CACHE = Path(os.environ.get("FE_CI_TEST_CACHE", Path.home() / ".cache" / "fe-ci-tests"))


def registry_wheel(version: str, name: str = "nvidia-cudnn-frontend") -> Path:
    """The registry's wheel of ``name==version`` for this interpreter, downloaded once."""
    dest = CACHE / "wheels" / f"{name}-{version}"
    found = sorted(dest.glob("*.whl"))
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                f"{name}=={version}",
                "-d",
                str(dest),
            ],
            check=True,
        )
        found = sorted(dest.glob("*.whl"))
    return found[0]


def candidate_env(version: str) -> envs.CandidateEnv:
    """A cached environment with the registry's ``version`` installed the runner's way."""
    root = CACHE / "envs" / f"frontend-{version}-py{sys.version_info[0]}{sys.version_info[1]}"
    marker = root / ".fe-ci-ready"
    env = envs.CandidateEnv(root)
    if marker.exists():
        return env
    env = envs.create_env(root)
    outcome = envs.install_candidate(
        env, registry_wheel(version), log_path=root / "install.log", timeout_s=900
    )
    assert outcome.ok, outcome.log_tail
    marker.write_text("ok\n")
    return env
