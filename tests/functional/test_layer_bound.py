"""Dependency layers bounded in size (runner/envs/layer_use.py): each use stamped; past the budget
the least recently used removed, never one used lately or one a runner holds the lock of.

Real layers, built by the real installer from the package index for constructed frontend wheels
that pin two versions of one small pure-Python distribution (two dependency sets, two layers of
about a second each), as in tests/functional/test_layers.py.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from core.wire import Stage, Status
from runner.cache import compile_cache
from runner.envs import layer_use, layers
from runner.pipeline import pipeline, pipeline_options
from testkit import processes
from testkit.service import ROOT, Service
from testkit.wheels import make_wheel
from tests.helpers import submit_wheel

pytestmark = pytest.mark.slow  # builds real dependency layers

PINS = ("termcolor==2.4.0", "termcolor==2.5.0")
DAY = 86_400.0


def _install(work: Path, wheel: Path, layers_dir: Path) -> str:
    """Install ``wheel`` on the warm path; the key of the layer it used."""
    opts = pipeline_options.Options(stages=[Stage.probe], work_dir=work, layers_dir=layers_dir)
    result = pipeline.Pipeline(opts).install(wheel)
    assert result.status == Status.pass_, result.reason
    (key,) = [p.name for p in layers_dir.iterdir() if p.name in result.reason]
    return key


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, list[str]]:
    """A layers folder with two real layers, the first used a day ago, the second now."""
    layers_dir = tmp_path / "layers"
    keys = [
        _install(
            tmp_path / f"job{i}",
            make_wheel(tmp_path / f"w{i}", "1.32.0", "", requires=(pin,)),
            layers_dir,
        )
        for i, pin in enumerate(PINS)
    ]
    old = time.time() - DAY
    os.utime(layers_dir / f"{keys[0]}.used", (old, old))
    return layers_dir, keys


def test_past_the_budget_the_least_recently_used_layer_goes_first(
    two: tuple[Path, list[str]], tmp_path: Path
) -> None:
    layers_dir, (old, new) = two
    sizes = {k: layer_use.size_of(layers_dir, k) for k in (old, new)}
    assert all(s > 10_000 for s in sizes.values()), sizes  # real venvs
    assert layer_use.evict(layers_dir, sum(sizes.values()), unused_s=3600) == []  # fits
    assert layer_use.evict(layers_dir, sizes[new], unused_s=3600) == [old]
    assert not (layers_dir / old).exists() and (layers_dir / new / "layer.json").is_file()
    assert not (layers_dir / f"{old}.used").exists() and not (layers_dir / f"{old}.bytes").exists()
    # the next job that needs it builds it again
    again = _install(
        tmp_path / "again",
        make_wheel(tmp_path / "w-again", "1.32.0", "", requires=(PINS[0],)),
        layers_dir,
    )
    assert again == old and (layers_dir / old / "layer.json").is_file()


def test_a_layer_used_lately_or_held_is_kept_over_the_budget(
    two: tuple[Path, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    layers_dir, (old, new) = two
    with layers.locked(layers_dir / f"{old}.lock", timeout_s=5):  # a runner building or stamping
        assert layer_use.evict(layers_dir, 1, unused_s=3600) == []
    assert "event=over_budget what=layer" in caplog.text
    assert (layers_dir / old).is_dir() and (layers_dir / new).is_dir()
    assert layer_use.evict(layers_dir, 1, unused_s=2 * DAY) == []  # both used within two days
    assert layer_use.evict(layers_dir, 1, unused_s=3600) == [old]  # new: used within the hour


def test_a_reused_layer_is_stamped(two: tuple[Path, list[str]], tmp_path: Path) -> None:
    layers_dir, (old, _) = two
    stamp = layers_dir / f"{old}.used"
    before = stamp.stat().st_mtime
    wheel = make_wheel(tmp_path / "w-reuse", "1.32.0", "", requires=(PINS[0],))
    assert _install(tmp_path / "reuse", wheel, layers_dir) == old
    assert stamp.stat().st_mtime > before + DAY / 2  # stamped now, not a day ago
    assert layer_use.evict(layers_dir, 1, unused_s=3600) == []  # both in use lately


def test_the_runner_bounds_its_layers_after_a_job(
    two: tuple[Path, list[str]], make_service: Any, tmp_path: Path
) -> None:
    """A real runner takes one CPU job of a wheel on the newer layer (reused, stamped), then
    brings its layers back within a budget that holds that one: the older goes. And its compile
    cache: a key last used a day ago goes, one used now stays."""
    layers_dir, (old, new) = two
    budget_gb = (layer_use.size_of(layers_dir, new) + 1) / 1e9
    kernels = compile_cache.Store(tmp_path / "kernels")
    for key, age in (("aged", DAY), ("fresh", 0.0)):
        stage = tmp_path / f"stage-{key}"
        (stage / "flex").mkdir(parents=True)
        (stage / "flex" / "kernel.o").write_bytes(b"\0" * 4096)
        assert kernels.publish(key, stage) == (1, [])
        os.utime(kernels.root / "used" / key, (time.time() - age,) * 2)
    svc: Service = make_service(FE_CI_GPU_ARCHS="")
    submit_wheel(svc, make_wheel(tmp_path / "w-job", "1.32.0", "", requires=(PINS[1],)))
    proc = processes.run(
        [sys.executable, "-m", "cli.main", "runner", "--once"],
        env=svc.runner_env(
            FE_CI_RUNNER_NAME="bounded",
            FE_CI_LAYERS_DIR=str(layers_dir),
            FE_CI_LAYERS_MAX_GB=str(budget_gb),
            FE_CI_COMPILE_CACHE_DIR=str(kernels.root),
            FE_CI_COMPILE_CACHE_MAX_GB=str(5000 / 1e9),
            FE_CI_CACHE_UNUSED_S="3600",
        ),
        cwd=ROOT,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"event=evicted what=layer name={old}" in proc.stderr
    assert not (layers_dir / old).exists() and (layers_dir / new / "layer.json").is_file()
    assert "event=evicted what=compile_cache name=aged" in proc.stderr
    assert sorted(p.name for p in (kernels.root / "published").iterdir()) == ["fresh"]
