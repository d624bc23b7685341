"""A cuDNN backend of the matrix on a runner (runner/envs/backend.py): its wheel installed once per
host as a layer and reused, loaded first by the stage process (its ``LD_LIBRARY_PATH``), proven
from ``/proc/self/maps``; a backend wheel that does not install errs the job's install stage.

The backend wheel is constructed (testkit/backends.py): the real one is about 600 MB. Its
libcudnn is a real shared library of the host, so the dynamic loader really maps it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.wire import Stage, Status
from runner.envs import backend
from runner.isolation import zygotes
from runner.pipeline import pipeline, pipeline_options
from testkit.backends import FRONTEND_INIT, backend_wheel, broken_backend_wheel
from testkit.wheels import make_wheel


@pytest.fixture
def frontend(tmp_path: Path) -> Path:
    """A frontend with no dependencies whose backend call dlopens ``libcudnn.so.9`` (beside the
    job's directory, which the job's uid can reach)."""
    return make_wheel(tmp_path, "1.32.0", FRONTEND_INIT)


def _pipe(
    work: Path,
    wheelhouse: Path,
    layers_dir: Path,
    cudnn: str | None,
    pool: zygotes.Zygotes | None = None,
) -> pipeline.Pipeline:
    opts = pipeline_options.Options(
        stages=[Stage.install, Stage.probe],
        work_dir=work,
        wheelhouse=wheelhouse,
        layers_dir=layers_dir,
        cudnn=cudnn,
        zygotes=pool,
        report_unselected=False,
    )
    return pipeline.Pipeline(opts)


def test_the_backend_layer_is_built_once_then_reused_and_loaded_first(
    tmp_path: Path, frontend: Path
) -> None:
    wheelhouse, layers_dir = tmp_path / "wheelhouse", tmp_path / "layers"
    backend_wheel(wheelhouse)
    first = _pipe(tmp_path / "job1", wheelhouse, layers_dir, "9.28.1").run(frontend)
    install = next(s for s in first.stages if s.name == Stage.install)
    assert install.status == Status.pass_, install.reason
    assert "cuDNN backend 9.28.1: nvidia-cudnn-cu13==9.28.1.*" in install.reason
    assert "built in" in install.reason
    built = [p for p in layers_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(built) == 1
    lib = built[0] / "venv"  # the layer's libcudnn, mapped by the frontend's backend call
    loaded = first.environment.libcudnn
    assert len(loaded["frontend"]) == 1
    assert loaded["frontend"][0].endswith("/nvidia/cudnn/lib/libcudnn.so.9")
    assert loaded["frontend"][0].startswith(str(lib.resolve()))
    assert loaded["torch"] == []  # a CPU-only torch loads no libcudnn
    assert first.environment.cudnn_requested == "9.28.1"
    # installed without its dependencies: the wheel's CUDA library is left to the host's torch
    # (a CPU-only torch brings none) and recorded, never resolved from the wheelhouse
    doc = json.loads((built[0] / "layer.json").read_text())
    assert doc["spec"]["host_deps"] is True
    assert doc["dists"] == ["nvidia-cudnn-cu13"]
    assert doc["left_to_host"] == ["nvidia-cublas (not on this host)"]
    stamp = (built[0] / "layer.json").stat().st_mtime_ns
    # the second job of the host installs nothing: the same layer, untouched
    second = _pipe(tmp_path / "job2", wheelhouse, layers_dir, "9.28.1").run(frontend)
    install = next(s for s in second.stages if s.name == Stage.install)
    assert install.status == Status.pass_, install.reason
    assert f"layer {built[0].name} reused" in install.reason
    assert [p for p in layers_dir.iterdir() if p.is_dir() and not p.name.startswith(".")] == built
    assert (built[0] / "layer.json").stat().st_mtime_ns == stamp
    assert second.environment.libcudnn["frontend"] == loaded["frontend"]


def test_a_backend_cells_probe_forks_a_zygote_of_that_backend(
    tmp_path: Path, frontend: Path
) -> None:
    """A runner's probe on a backend of the matrix is a fork of a zygote started with that
    backend's library first on its ``LD_LIBRARY_PATH`` (the loader reads it only as a process
    starts): the frontend's dlopen there maps the layer's libcudnn, as in a fresh interpreter.
    The host cell's probe forks a zygote of its own, which maps none."""
    wheelhouse, layers_dir = tmp_path / "wheelhouse", tmp_path / "layers"
    backend_wheel(wheelhouse)
    pool = zygotes.Zygotes(tmp_path / "zygotes")
    try:
        cell = _pipe(tmp_path / "job1", wheelhouse, layers_dir, "9.28.1", pool).run(frontend)
        host = _pipe(tmp_path / "job2", wheelhouse, layers_dir, None, pool).run(frontend)
        live = {z.key: z.forks for z in pool._live.values()}
    finally:
        pool.close()
    (layer,) = [p for p in layers_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    (loaded,) = cell.environment.libcudnn["frontend"]
    assert loaded.startswith(str(layer.resolve())), cell.environment.libcudnn
    assert loaded.endswith("/nvidia/cudnn/lib/libcudnn.so.9")
    assert host.environment.libcudnn == {"torch": [], "frontend": []}
    # two zygotes, each forked once: the backend's and the host's (no layer: no dependencies)
    assert sorted(live.values()) == [1, 1] and pool.key(None) in live
    for result in (cell, host):
        assert "probe ran in a warm worker" in (result.environment.sandbox or "")


def test_the_host_backend_loads_no_layer(tmp_path: Path, frontend: Path) -> None:
    """The same job on the host's backend: no layer, and the frontend's dlopen finds no
    libcudnn on this CPU host (its backend call fails, which the probe reports)."""
    wheelhouse, layers_dir = tmp_path / "wheelhouse", tmp_path / "layers"
    backend_wheel(wheelhouse)
    result = _pipe(tmp_path / "job", wheelhouse, layers_dir, None).run(frontend)
    install = next(s for s in result.stages if s.name == Stage.install)
    assert install.status == Status.pass_ and "cuDNN backend" not in install.reason
    assert result.environment.libcudnn == {"torch": [], "frontend": []}
    assert result.environment.cudnn_requested is None


def test_a_backend_wheel_that_does_not_install_errs_the_install_stage(
    tmp_path: Path, frontend: Path
) -> None:
    wheelhouse, layers_dir = tmp_path / "wheelhouse", tmp_path / "layers"
    broken_backend_wheel(wheelhouse)
    result = _pipe(tmp_path / "job", wheelhouse, layers_dir, "9.28.1").run(frontend)
    by_name = {s.name: s for s in result.stages}
    install = by_name[Stage.install]
    assert install.status == Status.error
    assert install.reason.startswith(
        "the cuDNN backend 9.28.1 (nvidia-cudnn-cu13==9.28.1.*) did not install: "
    )
    assert by_name[Stage.probe].status == Status.skipped
    assert by_name[Stage.probe].reason == "install failed"
    assert not [p for p in layers_dir.iterdir() if p.is_dir()] if layers_dir.exists() else True


def test_the_backend_requirement_follows_the_host_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU-only torch (this host's) takes cu13, the newest; a full version is pinned exactly."""
    assert backend.cuda_major() == backend.DEFAULT_CUDA_MAJOR == 13
    assert backend.requirement("9.28.1") == "nvidia-cudnn-cu13==9.28.1.*"
    assert backend.requirement("9.26.0.51") == "nvidia-cudnn-cu13==9.26.0.51"
