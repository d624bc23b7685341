"""Every branch of the determinism verdict, on CPU, with real torch reductions.

The workloads here are real float32 computations whose summation order the test controls: a
matrix-vector product whose reduction runs in a seeded permutation of its columns. With the
"knob" honoured the order is fixed; without it each call draws a new order, which changes the
rounding and so the bytes. No cuDNN is involved: this is the harness, not a subject.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from core.wire import DriftRow, StageResult
from runner.inside import arms, determinism, documents, stats
from runner.inside.measure import Settings, measure_subject
from runner.isolation import candidate
from tests.fakesubjects import FakeSubject, Reduction
from tests.fakesubjects import floats as _floats
from tests.fakesubjects import integers as _integers

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]


def _measure(
    subject: FakeSubject, start: str | None = None, start_from: int | None = None, **kw: object
):
    settings = Settings(**{"repeats": 8, "max_repeats": 64, "luck_target": 1e-3, **kw})  # type: ignore[arg-type]
    return measure_subject(subject, CPU, settings, start_config=start, start_from=start_from)


def _det_rows(outcome) -> list[DriftRow]:
    rows = [DriftRow.model_validate(r) for r in outcome.drift]
    return [r for r in rows if r.arm == "deterministic"]


def test_exact_with_a_varying_control_passes() -> None:
    subject = FakeSubject(lambda _n: Reduction(*_floats(4096, 1)))
    out = _measure(subject)
    assert out.check["status"] == "pass", out.check["detail"]
    metrics = out.check["metrics"]
    assert metrics["control"]["varying"] == 7  # every knob-off run differed from run 0
    assert metrics["stopped_by"] == "luck_target"
    assert metrics["luck_probability"] < 1e-3
    (row,) = _det_rows(out)
    assert row.differing == 0 and row.distinct == 1 and row.finite
    control = next(r for r in out.drift if r["arm"] == "control")
    assert control["distinct"] > 1 and control["max_abs_diff"] > 0
    assert [c["status"] for c in out.numerics] == ["pass"]


def test_exact_with_a_steady_control_is_inconclusive() -> None:
    subject = FakeSubject(lambda _n: Reduction(*_integers(4096)))
    out = _measure(subject)
    assert out.check["status"] == "inconclusive"
    assert "control never varied" in out.check["detail"]
    assert out.check["metrics"]["stopped_by"] == "control_steady"
    assert out.check["metrics"]["luck_probability"] == 1.0


def test_run_cap_before_the_luck_target_is_inconclusive() -> None:
    # the control varies in exactly one run (call 5: one warm-up, then control run 4)
    subject = FakeSubject(lambda _n: Reduction(*_floats(4096, 2), shuffle_when=lambda c: c == 5))
    out = _measure(subject, max_repeats=16)
    assert out.check["status"] == "inconclusive", out.check["detail"]
    metrics = out.check["metrics"]
    # one varying run in 7 cannot certify: the control was sampled again up to the cap
    assert metrics["control"]["varying"] == 1 and metrics["control"]["comparisons"] == 15
    assert "walked on" in metrics["config_reason"]
    assert metrics["stopped_by"] == "max_repeats"
    assert metrics["deterministic_runs"] == 16
    assert metrics["luck_probability"] == pytest.approx(
        stats.luck_probability(stats.clopper_pearson_lower(1, 15), 15)
    )
    assert "run cap" in out.check["detail"]


def test_a_varying_deterministic_arm_fails() -> None:
    subject = FakeSubject(lambda _n: Reduction(*_floats(4096, 3), honours_knob=False))
    out = _measure(subject)
    assert out.check["status"] == "fail"
    (row,) = _det_rows(out)
    assert row.differing > 0 and row.distinct > 1 and row.max_abs_diff and row.max_abs_diff > 0
    assert "deterministic arm varied" in out.check["detail"]
    assert row.stopped_by == "varied"


def test_nan_output_fails_even_when_its_bytes_are_stable() -> None:
    def make(_n: str) -> Reduction:
        w, x = _floats(4096, 4)
        x[17] = math.nan
        return Reduction(w, x)

    out = _measure(FakeSubject(make))
    assert out.check["status"] == "fail"
    assert "non-finite" in out.check["detail"]
    (row,) = _det_rows(out)
    assert not row.finite and row.stopped_by == "non_finite"
    assert [c["status"] for c in out.numerics] == ["fail"]


def test_negative_zero_and_positive_zero_are_different_bytes() -> None:
    # 1e8 + 1 - 1e8 - 0.5 is -0.5 or +0.5 depending on the order of the first three terms; scaled
    # by 1e-45 it underflows to -0.0 or +0.0, which torch.equal calls equal.
    w = torch.ones(1, 4)
    x = torch.tensor([1e8, 1.0, -1e8, -0.5])
    orders = [torch.tensor([0, 1, 2, 3]), torch.tensor([0, 2, 1, 3])]
    values = [(w[:, o] * x[o]).sum(dim=1) * 1e-45 for o in orders]
    assert values[0].item() == 0.0 and values[1].item() == 0.0
    assert torch.equal(values[0], values[1])
    assert arms.digest(values[0]) != arms.digest(values[1])

    @dataclass
    class SignedZero(Reduction):
        def run(self, knob: bool) -> dict[str, torch.Tensor]:
            call, self.calls = self.calls, self.calls + 1
            return {"out": values[call % 2].clone()}

    out = _measure(FakeSubject(lambda _n: SignedZero(w, x)))
    assert out.check["status"] == "fail"
    (row,) = _det_rows(out)
    assert row.differing > 0 and row.distinct == 2
    assert row.max_abs_diff == 0.0  # no numeric difference at all: only the bytes tell


def test_escalation_picks_the_first_config_whose_control_varies() -> None:
    made = {
        "ints": lambda: Reduction(*_integers(4096)),
        "floats_small": lambda: Reduction(*_floats(2048, 5)),
        "floats_large": lambda: Reduction(*_floats(8192, 6)),
    }
    subject = FakeSubject(lambda n: made[n](), names=tuple(made))
    out = _measure(subject)
    assert out.check["status"] == "pass"
    assert out.config == "floats_small"
    assert subject.prepared == ["ints", "floats_small"]  # never went further than needed
    history = out.check["metrics"]["escalation"]
    assert [h["config"] for h in history] == ["ints", "floats_small"]
    assert history[0]["varying"] == 0 and history[1]["varying"] == 7
    assert "first config" in out.check["metrics"]["config_reason"]
    assert all(r["config"]["name"] == "floats_small" for r in out.drift)


@dataclass
class KnobLog(Reduction):
    """A Reduction that records the knob of every call, warm-ups included."""

    knobs: list[bool] = field(default_factory=list)

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        self.knobs.append(knob)
        return super().run(knob)


def test_the_deterministic_arm_warms_up_only_at_the_chosen_config() -> None:
    made = {"ints": KnobLog(*_integers(4096)), "floats": KnobLog(*_floats(2048, 5))}
    out = _measure(FakeSubject(lambda n: made[n], names=tuple(made)))
    assert out.config == "floats" and out.check["status"] == "pass"
    # the config left behind ran its control arm only: no deterministic kernel compiled for it
    assert made["ints"].knobs == [False] * 9  # one warm-up, eight control runs
    # the chosen one: warm-up and control runs knob off, then one warm-up knob on before the
    # deterministic arm's runs, none of which is a warm-up
    knobs = made["floats"].knobs
    runs = out.check["metrics"]["deterministic_runs"]
    assert knobs[: 9 + runs + 1] == [False] * 9 + [True] * (runs + 1)
    # then the comparison at the same config, on the same workload (no warm-up of its own):
    # the run that sizes its samples, an untimed pair, then the arms interleaved in samples
    n = out.check["metrics"]["comparison"]["cost"]["runs_per_sample"]
    off, on = [False] * n, [True] * n
    assert knobs[9 + runs + 1 :] == [False, *off, *on] + [*off, *on, *on, *off] * 4
    assert out.check["metrics"]["deterministic_warmup_s"] >= 0
    phases = out.check["metrics"]["phases"]
    assert set(phases) == {
        "inputs_s",
        "warmup_s",
        "control_s",
        "deterministic_s",
        "numerics_s",
        "comparison_s",
    }


def test_a_remembered_config_is_kept_while_its_control_varies() -> None:
    made = {
        "floats_small": lambda: Reduction(*_floats(2048, 5)),
        "floats_large": lambda: Reduction(*_floats(8192, 6)),
    }
    subject = FakeSubject(lambda n: made[n](), names=tuple(made))
    out = _measure(subject, start="floats_large", start_from=41)
    assert out.config == "floats_large" and subject.prepared == ["floats_large"]
    metrics = out.check["metrics"]
    assert "still varied" in metrics["config_reason"]
    assert "remembered config floats_large from build #41" in metrics["config_reason"]
    assert metrics["start"] == {
        "config": "floats_large",
        "build_id": 41,
        "outcome": "kept",
        "chosen": "floats_large",
    }
    assert metrics["escalation_steps"] == 0


def test_a_remembered_config_that_stopped_varying_escalates_upward_only() -> None:
    made = {
        "floats_small": lambda: Reduction(*_floats(2048, 5)),
        "ints": lambda: Reduction(*_integers(4096)),  # the remembered one, now steady
        "floats_large": lambda: Reduction(*_floats(8192, 6)),
    }
    subject = FakeSubject(lambda n: made[n](), names=tuple(made))
    out = _measure(subject, start="ints", start_from=7)
    assert subject.prepared == ["ints", "floats_large"]  # never shrinks to floats_small
    assert out.config == "floats_large" and out.check["status"] == "pass"
    metrics = out.check["metrics"]
    assert metrics["start"]["outcome"] == "escalated" and metrics["start"]["build_id"] == 7
    assert metrics["escalation_steps"] == 1


def test_a_remembered_config_the_subject_no_longer_has_walks_from_the_smallest() -> None:
    made = {
        "ints": lambda: Reduction(*_integers(4096)),
        "floats": lambda: Reduction(*_floats(2048, 5)),
    }
    subject = FakeSubject(lambda n: made[n](), names=tuple(made))
    out = _measure(subject, start="gone", start_from=3)
    assert subject.prepared == ["ints", "floats"]
    assert out.check["metrics"]["start"]["outcome"] == "unknown"
    assert "is not a config of this subject" in out.check["metrics"]["config_reason"]


def test_negative_control_never_passes() -> None:
    # honoured knob: in the negative control the deterministic arm runs knob off and varies
    honest = FakeSubject(lambda _n: Reduction(*_floats(4096, 8)))
    assert _measure(honest, negative_control=True).check["status"] == "fail"
    # a kernel that happens to repeat itself after the control: a pass in the real run, but with
    # the knob off the same exactness is luck, so the negative control reports inconclusive
    lucky = lambda _n: Reduction(*_floats(4096, 9), shuffle_when=lambda c: c < 10)  # noqa: E731
    assert _measure(FakeSubject(lucky)).check["status"] == "pass"
    out = _measure(FakeSubject(lucky), negative_control=True)
    assert out.check["status"] == "inconclusive"
    assert out.check["metrics"]["negative_control"] is True
    assert "negative control" in out.check["detail"]


def test_numerics_fail_when_the_reference_disagrees() -> None:
    @dataclass
    class Wrong(Reduction):
        def reference(self) -> dict[str, torch.Tensor]:
            return {"out": super().reference()["out"] + 1.0}

    out = _measure(FakeSubject(lambda _n: Wrong(*_floats(1024, 10))))
    assert out.check["status"] == "pass"  # bit-stable ...
    (num,) = out.numerics
    assert num["name"] == "cpu_reduction.out" and num["status"] == "fail"  # ... but wrong
    assert num["metrics"]["max_abs_err"] == pytest.approx(1.0, rel=1e-3)


def test_a_pinned_config_runs_alone_even_when_its_control_is_steady() -> None:
    made = {
        "ints": lambda: Reduction(*_integers(4096)),
        "floats_small": lambda: Reduction(*_floats(2048, 5)),
    }
    subject = FakeSubject(lambda n: made[n](), names=tuple(made))
    out = measure_subject(subject, CPU, Settings(), pin_config="ints")
    assert subject.prepared == ["ints"]  # no escalation past a pinned config
    assert out.config == "ints" and out.check["metrics"]["config_name"] == "ints"
    assert out.check["status"] == "inconclusive"
    assert "pinned by --config" in out.check["metrics"]["config_reason"]
    other = FakeSubject(lambda n: made[n](), names=tuple(made))
    with pytest.raises(ValueError, match="no config 'huge'"):
        measure_subject(other, CPU, Settings(), pin_config="huge")


def test_the_deterministic_arm_leaves_digests_a_sample_and_its_cost() -> None:
    out = _measure(FakeSubject(lambda _n: Reduction(*_floats(4096, 12))))
    metrics = out.check["metrics"]
    (row,) = _det_rows(out)
    # the walk's own arms, one after the other: their cost, for the record
    walked = metrics["cost"]
    assert walked["timer"] == "perf_counter"  # no CUDA events on CPU
    assert walked["deterministic_runs"] == row.runs and walked["control_runs"] == 8
    # what the next build compares against: the comparison, at the walk's config (none pinned)
    compared = metrics["comparison"]
    assert compared["config_name"] == out.config and compared["pinned"] is False
    assert set(compared["digests"]) == {"out"} and len(compared["digests"]["out"]) == 64
    sample = compared["sample"]["out"]
    assert sample["numel"] == 64 and sample["stride"] == 1 and len(sample["values"]) == 64
    reference = Reduction(*_floats(4096, 12)).run(True)["out"]
    assert sample["values"] == [float(v) for v in reference.tolist()]  # the first run's values
    cost = compared["cost"]
    assert cost["interleaved"] is True and cost["timer"] == "perf_counter"
    assert cost["deterministic_runs"] == cost["control_runs"] == 8
    assert cost["ratio"] == pytest.approx(cost["deterministic_median_s"] / cost["control_median_s"])


def test_timings_separate_compile_from_runs() -> None:
    out = _measure(FakeSubject(lambda _n: Reduction(*_floats(1024, 11))))
    assert out.compile_s >= 0 and out.run_s > 0


def test_the_stage_without_a_gpu_is_skipped_and_absent_knobs_not_applicable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # run in-process, the stage points the DSL's caches at its directory through os.environ:
    # restore it, or every later subprocess of this test session inherits a stale cache
    for name in candidate.RUNNER_OWNED_ENV:
        monkeypatch.delenv(name, raising=False)
    caps = {
        "sdpa_bwd": {"importable": True, "present": True},
        "flex_attention_bwd": {"importable": True, "present": False},
        "grouped_gemm_dsrelu": {"importable": False, "present": False, "error": "ImportError: x"},
        "grouped_gemm_dglu": {"importable": True, "present": True},
    }
    doc = determinism.run(
        {
            "capabilities": caps,
            "compile_cache_dir": str(tmp_path / "cache"),
            "compile_cache_key": "key-the-runner-chose",
            "repeats": 8,
        }
    )
    assert documents.problems("determinism", doc) == []
    stage = StageResult.model_validate({**doc, "name": "determinism"})
    assert stage.status == "skipped" and "no CUDA GPU" in stage.reason
    by_name = {c.name: c for c in stage.checks}
    assert by_name["sdpa_bwd.deterministic"].status == "skipped"
    assert by_name["flex_attention_bwd.deterministic"].status == "not_applicable"
    assert "ImportError" in by_name["grouped_gemm_dsrelu.deterministic"].detail
    numerics = StageResult.model_validate({**doc["numerics"], "name": "numerics"})
    assert {c.name for c in numerics.checks} >= {"sdpa_bwd.dq", "grouped_gemm_dsrelu.dbias"}
    assert doc["negative_control"] is False
    # the directory and key are the runner's; the stage only points the DSL there
    assert doc["compile_cache"] == {
        "dir": str(tmp_path / "cache"),
        "key": "key-the-runner-chose",
        "warm": False,
    }
    # dglu is present, but this environment has no frontend to compile it with: a warning, and
    # no check that could be mistaken for covering the subject
    (warning,) = stage.findings
    assert warning.kind == "compile_only_unavailable" and warning.subject == "grouped_gemm_dglu"
    assert "grouped_gemm_dglu.compile_only" not in by_name


def test_the_module_speaks_the_json_stage_protocol(tmp_path: Path) -> None:
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"subjects": ["sdpa_bwd"], "negative_control": True}))
    result = tmp_path / "result.json"
    env = {"PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "runner.inside.determinism", "--in", str(params)]
    subprocess.run([*cmd, "--out", str(result)], check=True, env=env, timeout=300)
    doc = json.loads(result.read_text())
    assert doc["status"] == "skipped" and doc["negative_control"] is True
    assert documents.problems("determinism", doc) == []
    assert [c["name"] for c in doc["checks"]] == ["sdpa_bwd.deterministic"]
