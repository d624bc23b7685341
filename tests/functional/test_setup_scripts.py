"""The set-up scripts as a newcomer runs them: what ``scripts/install`` leaves beside torch, and
what the README says ``scripts/quickstart`` does to the system."""

from __future__ import annotations

import os
import re
import subprocess
import sysconfig
import venv
from pathlib import Path

from testkit.service import ROOT


def test_install_puts_numpy_beside_torch_so_torch_imports_without_a_warning(
    tmp_path: Path,
) -> None:
    """A fresh environment that already sees torch (through a ``.pth`` line to this environment's
    packages, which hold torch but no numpy) gets numpy from ``scripts/install``; importing torch
    there then prints nothing."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # the host's packages without numpy (the shared venv has it once scripts/setup has run)
    shared = tmp_path / "shared"
    shared.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith("numpy"):
            (shared / entry.name).symlink_to(entry)
    Path(site, "_shared.pth").write_text(f"{shared}\n")
    probe = [py, "-c", "import torch"]
    before = subprocess.run(probe, capture_output=True, text=True, timeout=300)
    assert before.returncode == 0, before.stderr
    assert "Failed to initialize NumPy" in before.stderr, before.stderr  # the state it fixes
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # the step every install takes before fe-ci's own (the images stop there: TORCH_ONLY=1);
    # the quickstart test installs the rest from a fresh copy
    env["TORCH_ONLY"] = "1"
    proc = subprocess.run(
        ["./scripts/install", str(env_dir), "", "torch==2.13.0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    after = subprocess.run(probe, capture_output=True, text=True, timeout=300)
    assert after.returncode == 0, after.stderr
    assert "Failed to initialize NumPy" not in after.stderr, after.stderr
    assert after.stderr.strip() == "", after.stderr
    numpy_at = subprocess.run(
        [py, "-c", "import numpy; print(numpy.__file__)"], capture_output=True, text=True
    ).stdout
    assert numpy_at.startswith(str(env_dir)), numpy_at  # installed there, not borrowed


def test_readme_says_quickstart_installs_system_packages_and_how_to_skip_it() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("./scripts/quickstart", 1)[1][:1500]
    assert "apt" in block and "root" in block, block
    skip = re.search(r"(FE_CI_SETUP_SYSTEM)=0", block)
    assert skip, block
    # the variable the README names is the one the scripts honour
    setup = (ROOT / "scripts" / "setup").read_text()
    assert f'"${{{skip.group(1)}:-1}}" = 1' in setup
    assert "./scripts/setup" in (ROOT / "scripts" / "quickstart").read_text()
