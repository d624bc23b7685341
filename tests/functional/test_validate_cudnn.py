"""``fe-ci validate --cudnn VERSION``: the pipeline on a cuDNN backend of the matrix, locally. On
this CPU host it installs the backend's layer (a constructed ``nvidia-cudnn-cu13`` wheel from a
local wheelhouse, testkit/backends.py: the real one is about 600 MB) and the GPU stages skip as
without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from testkit import processes
from testkit.backends import FRONTEND_INIT, backend_wheel
from testkit.service import ROOT
from testkit.wheels import make_wheel


def fe_ci(*args: str, cwd: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_")}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "FE_CI_RUNNER_LABELS": "",
            "FE_CI_CACHE_DIR": str(cwd / "cache"),
            "FE_CI_LAYERS_DIR": str(cwd / "layers"),
            **extra_env,
        }
    )
    return processes.run(
        [sys.executable, "-m", "cli.main", *args], cwd=cwd, env=env, text=True, timeout=600
    )


def test_validate_on_a_backend_loads_its_libcudnn(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    backend_wheel(wheelhouse)
    wheel = make_wheel(tmp_path, "1.32.0", FRONTEND_INIT)
    out = tmp_path / "report.json"
    proc = fe_ci(
        "validate",
        str(wheel),
        "--cudnn",
        "9.28.1",
        "--stages",
        "probe,determinism",
        "--json",
        str(out),
        "--work-dir",  # beside the wheel: the job's uid reaches both
        str(tmp_path / "work"),
        cwd=tmp_path,
        FE_CI_WHEELHOUSE=str(wheelhouse),
    )
    assert out.is_file(), proc.stdout + proc.stderr
    job = json.loads(out.read_text())["jobs"][0]
    stages = {s["name"]: s for s in job["stages"]}
    assert "cuDNN backend 9.28.1: nvidia-cudnn-cu13==9.28.1.*" in stages["install"]["reason"]
    assert job["environment"]["cudnn_requested"] == "9.28.1"
    assert job["environment"]["libcudnn"], json.dumps(job, indent=1)[:3000]
    (frontend_lib,) = job["environment"]["libcudnn"]["frontend"]
    assert frontend_lib.startswith(str((tmp_path / "layers").resolve()))
    assert frontend_lib.endswith("nvidia/cudnn/lib/libcudnn.so.9")
    assert stages["determinism"]["status"] == "skipped"  # no GPU here, as without --cudnn


def test_validate_refuses_an_unknown_backend_naming_the_known(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "1.32.0", "")
    proc = fe_ci("validate", str(wheel), "--cudnn", "9.99.1", cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "unknown cuDNN backend(s) 9.99.1" in proc.stderr
    assert "9.28.1" in proc.stderr and "host" in proc.stderr
    assert not (tmp_path / "layers").exists()
