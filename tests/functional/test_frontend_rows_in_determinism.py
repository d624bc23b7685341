"""The frontend's own refusal rows of a job that reuses the CPU job's decisions (the lease's
``refusal_scope`` "frontend") are made in the determinism stage's process, which has torch and the
frontend imported already, and are reported as the refusal stage's result: the real runner
pipeline on the registry's real 1.32.0 wheel and its real dependency layer, sandboxed stage
processes. This host has no GPU, so each row says ``skipped``; the same rows from a refusal stage
of their own say the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.frontend_refusals import FRONTEND_ONLY, FRONTEND_REFUSALS, REUSED_CHECK
from core.wire import Stage, StageResult, Status
from runner.envs import layers
from runner.pipeline import pipeline, pipeline_options
from testkit.registry import registry_wheel
from tests.helpers import layer_1_32

pytestmark = pytest.mark.slow  # a real dependency layer, real stage processes


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> layers.Layer:
    """The 1.32.0 layer, from the session's shared layers where there are (built once)."""
    built: layers.Layer = layer_1_32(tmp_path_factory.mktemp)
    return built


def _opts(work: Path, layer: layers.Layer, stages: list[Stage]) -> pipeline_options.Options:
    return pipeline_options.Options(
        stages=stages,
        work_dir=work,
        layers_dir=layer.root.parent,
        family="sm_90",
        gpu="NVIDIA H200",
        refusal_scope=FRONTEND_ONLY,
        report_unselected=False,
        subjects=["sdpa_bwd"],  # one subject: the rows, not the subjects, are under test
    )


def _checks(stage: StageResult) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status.value, c.detail) for c in stage.checks}


def _started(work: Path, stage: Stage) -> list[str]:
    """What the runner wrote to start a process of ``stage``: its parameters and its log."""
    return [p.name for p in (work / "params" / f"{stage}.json", work / "logs" / f"{stage}.log")
            if p.exists()]  # fmt: skip


def test_a_reusing_jobs_frontend_rows_run_in_the_determinism_process(
    layer: layers.Layer, tmp_path: Path
) -> None:
    stages = [Stage.install, Stage.probe, Stage.determinism, Stage.numerics, Stage.refusal]
    work = tmp_path / "job"
    result = pipeline.Pipeline(_opts(work, layer, stages)).run(registry_wheel("1.32.0"))
    by_name = {s.name: s for s in result.stages}
    assert [s.name for s in result.stages] == stages
    det, refusal = by_name[Stage.determinism], by_name[Stage.refusal]
    assert det.status == Status.skipped and "no CUDA GPU" in det.reason, det
    # the refusal stage's result came from the determinism stage's process: no process of its own
    assert refusal.timings["stage"]["in_determinism_process"] is True, refusal.timings
    assert _started(work, Stage.refusal) == []
    assert _started(work, Stage.determinism) == ["determinism.json", "determinism.log"]
    # the same report as before: the frontend's rows it ran, the consumer's it did not make
    assert refusal.status == Status.not_applicable, refusal
    assert refusal.reason.startswith("frontend refusal rows only")
    assert refusal.refusal == []
    checks = _checks(refusal)
    assert list(checks) == [*(r.check for r in FRONTEND_REFUSALS), REUSED_CHECK]
    assert checks[REUSED_CHECK][0] == "not_applicable"
    assert all(checks[r.check][0] == "skipped" for r in FRONTEND_REFUSALS), checks
    assert refusal.duration_s == refusal.timings["stage"]["rows_s"]

    # the rows from a refusal stage of their own (a fresh interpreter) say the same
    alone = tmp_path / "alone"
    pipe = pipeline.Pipeline(_opts(alone, layer, [Stage.install, Stage.probe, Stage.refusal]))
    assert pipe.install(registry_wheel("1.32.0")).status == Status.pass_
    assert pipe.probe().status == Status.pass_
    fresh = pipe.refusal()
    pipe.close()
    assert _started(alone, Stage.refusal) == ["refusal.json", "refusal.log"]
    assert "in_determinism_process" not in fresh.timings.get("stage", {})
    assert (fresh.status, fresh.reason, _checks(fresh)) == (refusal.status, refusal.reason, checks)
