"""The runner's settings reach the pipeline the same way for the agent, ``fe-ci validate`` and
``fe-ci bisect``: through ``Options.from_settings``, the one place that reads them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.wire import Stage
from runner.config import RunnerSettings
from runner.envs import envs
from runner.isolation import jail
from runner.pipeline import pipeline_options
from testkit.service import ROOT


def test_every_harness_setting_from_the_environment_reaches_the_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "FE_CI_REPEATS": "5",
        "FE_CI_MAX_REPEATS": "40",
        "FE_CI_LUCK_TARGET": "0.01",
        "FE_CI_CONTROL_SHARE": "0.25",
        "FE_CI_STAGE_TIMEOUT_S": "60",
        "FE_CI_INSTALL_TIMEOUT_S": "90",
        "FE_CI_INDEX_URL": "http://127.0.0.1:9/simple",
        "FE_CI_WHEELHOUSE": str(tmp_path / "wheelhouse"),
        "FE_CI_CACHE_DIR": str(tmp_path / "cache"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    opts = pipeline_options.Options.from_settings(
        RunnerSettings(), stages=[Stage.probe], work_dir=tmp_path / "work", family="sm_90"
    )
    assert (opts.repeats, opts.max_repeats, opts.luck_target, opts.control_share) == (
        5,
        40,
        0.01,
        0.25,
    )
    assert (opts.stage_timeout_s, opts.install_timeout_s) == (60.0, 90.0)
    assert opts.index_url == env["FE_CI_INDEX_URL"]
    assert opts.wheelhouse == tmp_path / "wheelhouse"
    assert opts.compile_cache_dir == tmp_path / "cache" / "compile-cache"
    assert opts.layers_dir == tmp_path / "cache" / "layers"
    assert (opts.stages, opts.work_dir, opts.family) == ([Stage.probe], tmp_path / "work", "sm_90")


def test_layers_dir_puts_the_layers_outside_the_cache_and_hides_them_from_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runners of one host with cache dirs of their own share their dependency layers through
    ``FE_CI_LAYERS_DIR``; a candidate still sees only the layer its own job was given."""
    monkeypatch.setenv("FE_CI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FE_CI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FE_CI_LAYERS_DIR", str(tmp_path / "shared-layers"))
    settings = RunnerSettings()
    opts = pipeline_options.Options.from_settings(
        settings, stages=[Stage.probe], work_dir=tmp_path / "work"
    )
    assert opts.layers_dir == tmp_path / "shared-layers"
    assert opts.private == (tmp_path / "data", tmp_path / "cache", tmp_path / "shared-layers")
    # a layers dir inside the cache is hidden with it, and named once
    monkeypatch.setenv("FE_CI_LAYERS_DIR", str(tmp_path / "cache" / "mine"))
    assert RunnerSettings().private_dirs() == (tmp_path / "data", tmp_path / "cache")


def test_compile_cache_dir_puts_the_kernels_outside_the_cache_and_hides_them_from_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runners of one host share the kernels they compiled through ``FE_CI_COMPILE_CACHE_DIR``;
    no candidate sees the store itself (a stage is shown its key's entries, linked)."""
    monkeypatch.setenv("FE_CI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FE_CI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FE_CI_COMPILE_CACHE_DIR", str(tmp_path / "kernels"))
    opts = pipeline_options.Options.from_settings(
        RunnerSettings(), stages=[Stage.determinism], work_dir=tmp_path / "work"
    )
    assert opts.compile_cache_dir == tmp_path / "kernels"
    assert opts.private == (tmp_path / "data", tmp_path / "cache", tmp_path / "kernels")
    monkeypatch.setenv("FE_CI_COMPILE_CACHE_DIR", str(tmp_path / "cache" / "kernels"))
    assert RunnerSettings().private_dirs() == (tmp_path / "data", tmp_path / "cache")


def _calls(path: Path, callee: str) -> list[int]:
    """The lines of ``path`` that call ``callee(...)`` directly (``Options(...)``, not
    ``Options.from_settings``)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name == callee:
                lines.append(node.lineno)
    return lines


def _callers(callee: str, home: Path) -> dict[str, list[int]]:
    return {
        str(path.relative_to(ROOT)): lines
        for folder in ("runner", "cli")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != home and (lines := _calls(path, callee))
    }


def test_the_runner_builds_options_only_from_its_settings(tmp_path: Path) -> None:
    """A second place that copies settings into ``Options`` drifts from this one (``fe-ci bisect``
    once built its own and would have missed any setting added later)."""
    assert _callers("Options", ROOT / "runner" / "pipeline" / "pipeline_options.py") == {}
    seen = tmp_path / "m.py"
    seen.write_text("def f(p):\n    return pipeline_options.Options(stages=[], work_dir=p)\n")
    assert _calls(seen, "Options") == [2]  # the check sees a direct call


def test_a_commit_is_built_from_the_runners_settings_in_one_place(tmp_path: Path) -> None:
    """A builder runner's job, ``fe-ci validate --commit`` and ``fe-ci bisect`` build a commit
    through ``build.build_commit``: none copies the settings into ``run_build`` by hand."""
    assert _callers("run_build", ROOT / "runner" / "build.py") == {}
    users = set(_callers("build_commit", ROOT / "runner" / "build.py"))
    assert users == {"runner/agent/job_runner.py", "cli/validate.py", "cli/bisection.py"}
    seen = tmp_path / "m.py"
    seen.write_text("def f(s):\n    return build.run_build('r', 'c', cache_dir=s)\n")
    assert _calls(seen, "run_build") == [2]


def test_the_harness_defaults_are_core_harness_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner's settings, a pipeline run's options, the walk's settings and a determinism
    stage given no parameters start from ``core/harness.py``: a default restated in one of them
    drifts from the others."""
    from core import harness
    from runner.inside import plan, walk

    for key in ("REPEATS", "MAX_REPEATS", "LUCK_TARGET", "CONTROL_SHARE"):
        monkeypatch.delenv(f"FE_CI_{key}", raising=False)
    expected = (harness.REPEATS, harness.MAX_REPEATS, harness.LUCK_TARGET, harness.CONTROL_SHARE)
    options = pipeline_options.Options(stages=[], work_dir=tmp_path)
    for found in (RunnerSettings(), options, walk.Settings(), plan.settings({})):
        assert (found.repeats, found.max_repeats, found.luck_target, found.control_share) == (
            expected
        ), type(found)


def test_the_sandbox_and_the_installer_are_runner_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """``FE_CI_SANDBOX`` and ``FE_CI_INSTALLER`` are read as every other setting: in any case, and
    a misspelt one is refused instead of quietly meaning the weakest sandbox or uv."""
    monkeypatch.setenv("FE_CI_SANDBOX", " PGroup ")
    monkeypatch.setenv("FE_CI_INSTALLER", "PIP")
    jail.mechanism.cache_clear()
    try:
        assert (RunnerSettings().sandbox, jail.mechanism().name) == ("pgroup", "pgroup")
        assert (RunnerSettings().installer, envs.choose_installer()) == ("pip", "pip")
        monkeypatch.setenv("FE_CI_SANDBOX", "bwarp")
        jail.mechanism.cache_clear()
        with pytest.raises(ValidationError, match="sandbox"):
            jail.mechanism()
    finally:
        monkeypatch.undo()
        jail.mechanism.cache_clear()
    monkeypatch.setenv("FE_CI_INSTALLER", "pipp")
    with pytest.raises(ValidationError, match="installer"):
        envs.choose_installer()


def test_the_service_and_fe_ci_bisect_cap_a_bisection_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``FE_CI_BISECT_MAX_BUILDS`` is one setting of both sides, defaulting to
    ``core.bisection``'s cap, and refused alike outside 1..64."""
    from core import bisection
    from service.config import Settings

    monkeypatch.delenv("FE_CI_BISECT_MAX_BUILDS", raising=False)
    caps = {Settings(data_dir=tmp_path).bisect_max_builds, RunnerSettings().bisect_max_builds}
    assert caps == {bisection.DEFAULT_MAX_BUILDS}
    monkeypatch.setenv("FE_CI_BISECT_MAX_BUILDS", "3")
    assert RunnerSettings().bisect_max_builds == Settings(data_dir=tmp_path).bisect_max_builds == 3
    monkeypatch.setenv("FE_CI_BISECT_MAX_BUILDS", "0")
    with pytest.raises(ValidationError):
        RunnerSettings()
