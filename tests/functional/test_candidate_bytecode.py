"""After the probe, the job's later stages load the candidate's byte-code instead of compiling its
sources again (``runner/bytecode.py``): the real 1.32.0 registry wheel, installed and probed by
the pipeline in a real environment on the session's dependency layer, then imported by a fresh
interpreter of that environment as a stage imports it (``PYTHONDONTWRITEBYTECODE`` set)."""

from __future__ import annotations

import logging
import os
import subprocess
from importlib.util import cache_from_source
from pathlib import Path

import pytest

from core.wire import Stage, Status
from runner import envs, pipeline, pipeline_options
from testkit.registry import registry_wheel
from testkit.service import session_caches

pytestmark = pytest.mark.slow  # installs and probes the 1.32.0 registry wheel


def _compiled_from_source(python: Path, modules: list[str]) -> list[str]:
    """The cudnn sources a fresh interpreter compiled (rather than loaded as byte-code) while
    importing ``modules``, as ``python -v`` reports them."""
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    proc = subprocess.run(
        [str(python), "-v", "-c", code, *modules],
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONWARNINGS": "ignore"},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return [
        line for line in proc.stderr.splitlines()
        if line.startswith("# code object from ") and "/cudnn/" in line and ".pyc" not in line
    ]  # fmt: skip


def test_the_probe_leaves_byte_code_for_what_the_later_stages_import(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    layers = session_caches().get("FE_CI_LAYERS_DIR")
    opts = pipeline_options.Options(
        stages=[Stage.probe],
        work_dir=tmp_path / "job",
        layers_dir=Path(layers) if layers else tmp_path / "layers",
    )
    pipe = pipeline.Pipeline(opts)
    with caplog.at_level(logging.INFO, logger="fe_ci.bytecode"):
        assert pipe.install(registry_wheel("1.32.0")).status == Status.pass_
        assert pipe.probe().status == Status.pass_
    imported = pipe._extra[Stage.probe]["imported"]
    assert len(imported) > 50 and "cudnn/__init__.py" in imported
    site = envs.CandidateEnv(pipe.python.parent.parent).site_packages()
    assert all(Path(cache_from_source(str(site / name))).is_file() for name in imported)
    assert f"files={len(imported)} skipped=0" in caplog.text
    modules = sorted(
        name.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for name in imported
    )
    assert _compiled_from_source(pipe.python, modules) == []
    # without it, the same imports compile every one of those sources again
    for name in imported:
        os.unlink(cache_from_source(str(site / name)))
    assert len(_compiled_from_source(pipe.python, modules)) == len(imported)
