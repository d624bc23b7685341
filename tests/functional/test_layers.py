"""Dependency layers: the warm install path (runner/envs/layers.py, runner/envs/envs.py
``install_warm``).

Real registry wheels (1.27.0 and 1.32.0, testkit/registry.py) where a test is about the
frontend's own dependency sets; where it is about the layer's machinery (its lock, the pip
fallback, what makes a layer unusable) a constructed frontend wheel (testkit/wheels.py) that
requires one small real distribution of the package index, whose layer builds in about a second
where the DSL's takes ten. Real venvs, the real installer (uv where present, else pip) with the
host's torch kept out of its hands.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest

from core.wire import Stage, Status
from runner.envs import envs, host, layers, warm_install
from runner.pipeline import pipeline, pipeline_options
from testkit.registry import candidate_env, registry_wheel
from testkit.wheels import make_wheel

pytestmark = pytest.mark.slow  # builds real dependency layers from registry wheels

SMALL = "termcolor"  # pure Python, no dependencies of its own, on neither the host nor the runner


def _opts(work: Path, layers_dir: Path | None, **kw: object) -> pipeline_options.Options:
    return pipeline_options.Options(
        stages=[Stage.probe],
        work_dir=work,
        layers_dir=layers_dir,
        **kw,  # type: ignore[arg-type]
    )


def _install(tmp: Path, name: str, wheel: Path, layers_dir: Path) -> pipeline.Pipeline:
    pipe = pipeline.Pipeline(_opts(tmp / name, layers_dir))
    result = pipe.install(wheel)
    assert result.status == Status.pass_, result.reason
    pipe.result.stages.append(result)
    return pipe


def _built(layers_dir: Path) -> list[Path]:
    return sorted(p for p in layers_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def _small_wheel(dest_dir: Path, *requires: str) -> Path:
    """A frontend wheel whose dependency set is ``SMALL`` (and ``requires``): its layer is real,
    built by the real installer from the index, and small."""
    return make_wheel(dest_dir, "1.32.0", "", requires=(SMALL, *requires))


def _dists(layer: Path) -> list[str]:
    return list(json.loads((layer / "layer.json").read_text())["dists"])


def _layer_named(pipe: pipeline.Pipeline, layers_dir: Path, verb: str) -> Path:
    """The layer the install stage of ``pipe`` says it ``verb`` (built / reused)."""
    reason = pipe.result.stages[0].reason
    found = re.search(rf"dependency layer (\w+) {verb}", reason)
    assert found, reason
    return layers_dir / found[1]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pipeline.Pipeline]:
    """Layers with 1.32.0's built once, for the tests that only add to them or read them: a
    layer's build (the DSL's install and bytecode) is most of this module's time."""
    root = tmp_path_factory.mktemp("shared")
    first = _install(root, "job1", registry_wheel("1.32.0"), root / "layers")
    return root / "layers", first


def test_second_install_of_the_same_dependency_set_reuses_the_layer(
    tmp_path: Path, shared: tuple[Path, pipeline.Pipeline]
) -> None:
    layers_dir, first = shared
    layer = _layer_named(first, layers_dir, "built")
    before = _built(layers_dir)
    stamp = (layer / "layer.json").stat().st_mtime_ns
    second = _install(tmp_path, "job2", registry_wheel("1.32.0"), layers_dir)
    assert _layer_named(second, layers_dir, "reused") == layer
    assert _built(layers_dir) == before and (layer / "layer.json").stat().st_mtime_ns == stamp
    # each job's venv is its own, and sees the layer only through its .pth line
    site = envs.CandidateEnv(tmp_path / "job2" / "env").site_packages()
    assert (site / layers.LAYER_PTH).read_text().count(str(layer)) == 1
    assert (site / "cudnn").is_dir()
    layer_site = layer / "venv" / "lib" / site.parent.name / "site-packages"
    assert layers.frontend_in(layer_site) == []
    # compiled once when built: a read-only layer without bytecode is compiled by every import
    assert list((layer_site / "nvidia_cutlass_dsl").rglob("*.pyc"))


def test_a_different_dependency_set_gets_a_different_layer(
    tmp_path: Path, shared: tuple[Path, pipeline.Pipeline]
) -> None:
    layers_dir, first = shared
    old = _install(tmp_path, "old", registry_wheel("1.27.0"), layers_dir)
    built = [_layer_named(first, layers_dir, "built"), _layer_named(old, layers_dir, "built")]
    assert built[0] != built[1] and set(built) <= set(_built(layers_dir))
    specs = [json.loads((p / "layer.json").read_text())["spec"] for p in built]
    reqs = sorted(tuple(s["requirements"]) for s in specs)
    assert any("torch-c-dlpack-ext" in r for r in reqs[0] + reqs[1])  # 1.27.0's cutedsl extra
    assert reqs[0] != reqs[1]
    for p in built:  # the candidate is never in a layer, nor a torch of its own
        dists = _dists(p)
        assert "nvidia-cudnn-frontend" not in dists and "torch" not in dists
        assert not list(p.rglob("cudnn/__init__.py"))


def test_a_layer_holding_the_frontend_is_refused(tmp_path: Path) -> None:
    wheel = _small_wheel(tmp_path / "wheel")
    layers_dir = tmp_path / "layers"
    _install(tmp_path, "job1", wheel, layers_dir)
    [layer] = _built(layers_dir)
    assert SMALL in _dists(layer)
    site = next(layer.glob("venv/lib/python*/site-packages"))
    os.chmod(site, 0o755)
    (site / "nvidia_cudnn_frontend-1.0.0.dist-info").mkdir()  # planted: another build's files
    pipe = pipeline.Pipeline(_opts(tmp_path / "job2", layers_dir))
    result = pipe.install(wheel)
    assert result.status == Status.pass_
    assert "plain install" in result.reason and "contains the frontend" in result.reason
    job_site = envs.CandidateEnv(tmp_path / "job2" / "env").site_packages()
    assert not (job_site / layers.LAYER_PTH).exists()


def test_a_dependency_conflict_with_the_host_torch_is_still_caught(tmp_path: Path) -> None:
    torch = host.host_torch()
    assert torch is not None
    wheel = _small_wheel(tmp_path / "wheel", "torch>=99")
    layers_dir = tmp_path / "layers"
    pipe = pipeline.Pipeline(_opts(tmp_path / "job", layers_dir))
    result = pipe.install(wheel)
    assert result.status == Status.fail, result.reason
    assert "torch" in result.reason
    assert _built(layers_dir) == []


def test_the_probe_answers_the_same_through_the_warm_path(
    tmp_path: Path, shared: tuple[Path, pipeline.Pipeline]
) -> None:
    wheel = registry_wheel("1.32.0")
    warm = pipeline.Pipeline(_opts(tmp_path / "warm", shared[0])).run(wheel)
    plain = pipeline.Pipeline(
        _opts(tmp_path / "plain", None, preinstalled=True,
              candidate_python=candidate_env("1.32.0").python)
    ).run(None)  # fmt: skip
    stages = {s.name: s for s in warm.stages}
    assert "dependency layer" in stages[Stage.install].reason
    assert stages[Stage.probe].status == Status.pass_
    assert warm.capabilities and warm.capabilities == plain.capabilities
    assert warm.version == plain.version == "1.32.0"
    assert sorted(f.model_dump_json() for f in warm.findings) == sorted(
        f.model_dump_json() for f in plain.findings
    )
    keys = ("python", "torch", "cutlass_dsl")
    assert [getattr(warm.environment, k) for k in keys] == [
        getattr(plain.environment, k) for k in keys
    ]


def test_markers_and_extras_decide_the_dependency_set() -> None:
    requires = (
        "nvidia-cutlass-dsl[cu13]>=4.8.0; sys_platform != 'win32' or platform_machine != 'ARM64'",
        "cuda-python; extra == 'cutedsl'",
        "triton>=3.7.0; sys_platform == 'win32' and extra == 'triton'",
        "nvidia-cudnn-frontend[cutedsl]; extra == 'all'",
    )
    assert layers.resolved_requirements(requires, []) == ("nvidia-cutlass-dsl[cu13]>=4.8.0",)
    assert layers.resolved_requirements(requires, ["all"]) == (
        "cuda-python",
        "nvidia-cutlass-dsl[cu13]>=4.8.0",
    )


def test_two_runners_building_the_same_layer_build_it_once(tmp_path: Path) -> None:
    meta = envs.read_wheel_metadata(_small_wheel(tmp_path / "wheel"))
    layers_dir = tmp_path / "layers"
    got: list[layers.Layer | None] = []
    errors: list[BaseException] = []
    together = threading.Barrier(2)  # both ask before either could have finished

    def build() -> None:
        try:
            together.wait()
            got.append(warm_install.ensure_layer(meta, layers_dir=layers_dir, timeout_s=900))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(got) == 2 and all(g is not None for g in got)
    assert {g.root for g in got if g} == set(_built(layers_dir))
    assert sorted(g.built_s is None for g in got if g) == [False, True]  # one built, one reused


def test_without_uv_the_layer_is_built_by_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(envs, "find_uv", lambda: None)
    wheel = _small_wheel(tmp_path / "wheel")
    first = _install(tmp_path, "job1", wheel, tmp_path / "layers")
    reason = first.result.stages[0].reason
    assert "by pip" in reason and "dependency layer" in reason, reason
    layer = _layer_named(first, tmp_path / "layers", "built")
    assert json.loads((layer / "layer.json").read_text())["spec"]["installer"] == "pip"
    assert SMALL in _dists(layer)
    second = _install(tmp_path, "job2", wheel, tmp_path / "layers")
    assert "reused" in second.result.stages[0].reason


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_a_wheelhouse_alone_means_no_index_and_an_index_is_passed_on(
    installer: str, tmp_path: Path
) -> None:
    if installer == "uv" and envs.find_uv() is None:
        pytest.skip("uv is not installed beside the runner")
    env = envs.CandidateEnv(tmp_path / "env")
    offline = envs.install_command(installer, env, ["x.whl"], wheelhouse=tmp_path / "wh")
    assert offline[offline.index("--find-links") + 1] == str(tmp_path / "wh")
    assert "--no-index" in offline and offline[-1] == "x.whl"
    both = envs.install_command(
        installer, env, ["x.whl"], wheelhouse=tmp_path / "wh", index_url="http://127.0.0.1:1/simple"
    )
    assert "--no-index" not in both and both[-1] == "x.whl"
    assert both[both.index("--index-url") + 1] == "http://127.0.0.1:1/simple"
