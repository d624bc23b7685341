"""The runner's settings reach the pipeline the same way for the agent and ``fe-ci validate``."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import pipeline_options
from runner.config import RunnerSettings
from runner.wire import Stage


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
    assert (opts.stages, opts.work_dir, opts.family) == ([Stage.probe], tmp_path / "work", "sm_90")
