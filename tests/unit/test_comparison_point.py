"""The comparison point, measured by the harness wherever its walk goes, on CPU.

The workloads are fakes (``tests/fakesubjects.py``: real float32 reductions whose summation order
the test sets) because the real subjects need a CUDA GPU; the harness that walks, judges and
measures the comparison is the real one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from runner.inside import comparison, plan
from runner.inside.measure import Outcome, Settings, measure_subject
from tests.fakesubjects import FakeSubject, Reduction, floats, integers

CPU = torch.device("cpu")


def _three() -> FakeSubject:
    made = {
        "ints": lambda: Reduction(*integers(4096)),  # its control never varies
        "floats_small": lambda: Reduction(*floats(2048, 5)),
        "floats_large": lambda: Reduction(*floats(8192, 6)),
    }
    return FakeSubject(lambda n: made[n](), names=tuple(made))


def _measure(subject: FakeSubject, **kw: object) -> Outcome:
    return measure_subject(subject, CPU, Settings(), **kw)  # type: ignore[arg-type]


def test_the_comparison_stays_at_the_pin_wherever_the_walk_goes() -> None:
    """A pin whose control no longer varies (``ints``): the walk tries it first, goes on from
    where it starts, and the comparison is measured on the pin's workload it already built."""
    pin = {"config": "ints", "series": 3}
    walked_up = _three()
    high = _measure(walked_up, start_config="floats_large", compare_at=pin)
    assert high.config == "floats_large"  # detection at the remembered config ...
    assert walked_up.prepared == ["ints", "floats_large"]  # ... the pin's workload built once
    here = _three()
    low = _measure(here, compare_at=pin)  # nothing remembered: the walk starts at the pin
    assert low.config == "floats_small" and here.prepared == ["ints", "floats_small"]
    assert "no remembered config; the comparison point ints" in low.check["detail"]
    a, b = high.check["metrics"]["comparison"], low.check["metrics"]["comparison"]
    for doc in (a, b):
        assert doc["config_name"] == "ints" and doc["pinned"] and doc["series"] == 3
        assert doc["outputs"]["out"]["distinct"] == 1 and doc["cost"]["interleaved"]
        assert len(doc["cost"]["control_us"]) == len(doc["cost"]["deterministic_us"]) == 8
        assert doc["reused_workload"] is True
    assert a["digests"] == b["digests"]  # comparable across the two builds
    assert high.phases["comparison_s"] > 0


def test_the_walk_settles_at_the_pin_where_its_control_varies() -> None:
    """A remembered config above the pin is not built when the pin's control varies: one
    workload for the verdict and the comparison."""
    subject = _three()
    out = _measure(
        subject, start_config="floats_large", compare_at={"config": "floats_small", "series": 1}
    )
    assert out.config == "floats_small" and subject.prepared == ["floats_small"]
    assert "the comparison point floats_small: its control varied" in out.check["detail"]
    assert out.check["metrics"]["comparison"]["reused_workload"] is True
    assert out.check["metrics"]["start"]["outcome"] == "escalated"


def test_at_the_pin_a_control_that_can_certify_is_enough() -> None:
    """At the comparison point a control below the share that can still certify within the run
    cap (3 of 7: 51 deterministic runs for the luck target) ends the walk: the deterministic
    arm runs longer instead of another config being built."""
    made = {
        "sometimes": lambda: Reduction(*floats(2048, 5), shuffle_when=lambda c: c in (2, 3, 4)),
        "always": lambda: Reduction(*floats(8192, 6)),
    }
    subject = FakeSubject(lambda n: made[n](), names=tuple(made))
    out = _measure(subject, compare_at={"config": "sometimes", "series": 1})
    metrics = out.check["metrics"]
    assert out.config == "sometimes" and subject.prepared == ["sometimes"]
    assert metrics["control"] == {
        "varying": 3,
        "comparisons": 7,
        "share": pytest.approx(3 / 7, abs=1e-4),
    }
    assert "enough to certify within 64 runs" in metrics["config_reason"]
    assert out.check["status"] == "pass" and metrics["deterministic_runs"] == 52
    assert metrics["luck_probability"] < metrics["luck_target"]
    # the same control elsewhere than the pin is not enough: the walk goes on up
    other = FakeSubject(lambda n: made[n](), names=tuple(made))
    elsewhere = _measure(other, compare_at={"config": "always", "series": 1})
    assert elsewhere.config == "always" and other.prepared == ["always"]


@dataclass
class KnobLog(Reduction):
    knobs: list[bool] = field(default_factory=list)

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        self.knobs.append(knob)
        return super().run(knob)


def test_the_arms_are_interleaved_after_both_compile() -> None:
    made = {"walk": KnobLog(*floats(2048, 7)), "pin": KnobLog(*integers(4096))}
    subject = FakeSubject(lambda n: made[n], names=("walk", "pin"))
    out = _measure(subject, start_config="walk", compare_at={"config": "pin", "series": 1})
    assert out.config == "walk" and subject.prepared == ["pin", "walk"]
    cost = out.check["metrics"]["comparison"]["cost"]
    n = cost["runs_per_sample"]  # sized from this host's run of the reduction
    assert 1 <= n <= comparison.RUNS_PER_SAMPLE_MAX
    # at the pin, the walk's control (its warm-up, eight runs); then the comparison: the
    # deterministic arm's warm-up, one control run that sizes the samples, an untimed pair,
    # then samples of n runs back to back, control/deterministic pairs whose order alternates
    off, on = [False] * n, [True] * n
    pairs = [*off, *on, *on, *off] * 4
    assert made["pin"].knobs == [False] * 9 + [True] + [False] + off + on + pairs
    assert len(cost["control_us"]) == len(cost["deterministic_us"]) == 8
    assert out.check["metrics"]["comparison"]["outputs"]["out"]["distinct"] == 1


class Timed(Reduction):
    """A reduction whose runs take ``seconds`` each at the least (a sleep: CPU time stands for
    GPU time)."""

    seconds = 0.012

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        time.sleep(self.seconds)
        return super().run(knob)


def test_a_sample_is_as_many_runs_as_make_it_long_enough() -> None:
    """A 4 ms run: three back to back make a 10 ms sample; 0.1 ms: the cap; a run as long as a
    sample (or a clock that says 0) is a sample of its own, or of the cap. Then on a workload
    whose runs take 12 ms at the least: one run a sample."""
    assert comparison.runs_for(0.004) == 3
    assert comparison.runs_for(0.0001) == comparison.RUNS_PER_SAMPLE_MAX
    assert comparison.runs_for(0.010) == comparison.runs_for(2.0) == 1
    assert comparison.runs_for(0.0) == comparison.RUNS_PER_SAMPLE_MAX
    assert comparison.runs_per_sample(Timed(*floats(256, 3)), CPU) == 1


def test_a_pin_the_subject_lacks_costs_the_comparison_not_the_verdict() -> None:
    out = _measure(_three(), compare_at={"config": "gone", "series": 2})
    assert out.check["status"] == "pass"
    compared = out.check["metrics"]["comparison"]
    assert "no config 'gone'" in compared["error"] and "floats_small" in compared["error"]
    assert "digests" not in compared


def test_the_stage_keeps_the_pins_of_its_own_family() -> None:
    params = {
        "comparison": [
            {"subject": "sdpa_bwd", "family": "sm_90", "config": "b4", "series": 2},
            {"subject": "sdpa_bwd", "family": "sm_100", "config": "b8", "series": 1},
            {"subject": 7, "family": "sm_90", "config": "b4"},  # not a name: ignored
        ]
    }
    assert plan.comparison_points(params, "sm_90") == {"sdpa_bwd": {"config": "b4", "series": 2}}
    assert plan.comparison_points({}, "sm_90") == {}


def test_a_walk_from_the_comparison_point_escalates_where_its_control_is_steady() -> None:
    """A pin whose control no longer varies (``ints``) is where the walk starts, not where it
    stays: it goes up as from any start, and the comparison is still measured at the pin."""
    subject = _three()
    out = _measure(subject, compare_at={"config": "ints", "series": 1})
    assert out.config == "floats_small" and subject.prepared == ["ints", "floats_small"]
    assert out.check["metrics"]["comparison"]["config_name"] == "ints"
    start = out.check["metrics"]["start"]
    assert start["config"] == "ints" and start["outcome"] == "escalated"
    # a remembered config still comes first
    again = _three()
    _measure(again, start_config="floats_large", compare_at={"config": "ints", "series": 1})
    assert again.prepared == ["ints", "floats_large"]


def test_nothing_runs_beside_the_comparisons_timed_runs() -> None:
    """``quiet`` (the stage ends its processes compiling ahead) comes after the verdict's runs and
    before every run of the comparison."""
    built: dict[str, Reduction] = {}

    def make(name: str) -> Reduction:
        built[name] = Reduction(*floats(2048, 5))
        return built[name]

    seen: list[int] = []
    out = _measure(
        FakeSubject(make, names=("floats",)),
        compare_at={"config": "floats", "series": 1},
        quiet=lambda: seen.append(built["floats"].calls),
    )
    m, doc = out.check["metrics"], out.check["metrics"]["comparison"]
    assert out.check["status"] == "pass" and len(seen) == 1
    assert seen[0] >= m["control"]["comparisons"] + 1 + m["deterministic_runs"]
    assert built["floats"].calls - seen[0] >= 2 * len(doc["cost"]["control_us"]) > 0


@dataclass(frozen=True)
class _Declared:
    """Stands in for a subject's declaration in the registry: the stage loads its harness from
    it and keys its comparison on this module's file."""

    harness: FakeSubject
    outputs: tuple[str, ...] = ("out",)
    module_name: str = __name__

    def load(self) -> FakeSubject:
        return self.harness


def _stage_of_two(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[dict[str, Any], dict[str, Reduction], list[dict[str, int]]]:
    """The real ``_run_subjects`` over two subjects of CPU workloads, both pinned where their
    control varies: its document, each subject's workload (its ``calls`` count every run) and,
    for each ``quiet``, how many runs each workload built so far had made by then."""
    from runner.inside import determinism

    built: dict[str, Reduction] = {}

    def maker(subject: str) -> FakeSubject:
        def make(_config: str) -> Reduction:
            built[subject] = Reduction(*floats(2048, 5))
            return built[subject]

        return FakeSubject(make, names=("floats",), name=subject)

    names = ["first", "second"]
    monkeypatch.setattr(determinism, "SUBJECTS", {n: _Declared(maker(n)) for n in names})
    seen: list[dict[str, int]] = []
    doc = determinism._run_subjects(
        names,
        {n: ("", "") for n in names},
        CPU,
        Settings(),
        {},
        {},
        (None, None),
        ("sm_90", {}, None),
        {n: {"config": "floats", "series": 1} for n in names},
        lambda: seen.append({n: r.calls for n, r in built.items()}),
    )
    assert [c["status"] for c in doc["checks"]] == ["pass", "pass"]
    return doc, built, seen


def test_the_stage_times_every_comparison_after_every_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stage measures each subject's verdict, then ends what runs beside it (``quiet``, once),
    then times the comparisons: the processes compiling ahead have every verdict's time to end,
    and no subject's comparison waits for them while later subjects are still to measure."""
    doc, built, seen = _stage_of_two(monkeypatch)
    (at_quiet,) = seen  # once, with both verdicts measured and no comparison yet
    assert set(at_quiet) == {"first", "second"}
    for check in doc["checks"]:
        n, m = check["name"].split(".")[0], check["metrics"]
        compared = m["comparison"]
        assert at_quiet[n] >= m["control"]["comparisons"] + 1 + m["deterministic_runs"]
        assert built[n].calls - at_quiet[n] >= 2 * len(compared["cost"]["control_us"]) > 0
        assert compared["comparable"] and doc["timings"][n]["comparison_s"] > 0


def test_short_of_memory_the_held_comparisons_run_before_the_next_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A comparison waiting for its turn holds its workload; where the GPU has less than half its
    memory free, the stage times the waiting ones (``quiet`` first) before the next subject's
    verdict instead of after every verdict."""
    from runner.inside import determinism

    monkeypatch.setattr(determinism, "_memory_short", lambda _device: True)
    doc, built, seen = _stage_of_two(monkeypatch)
    first, second = seen  # before the second subject was built, then before its comparison
    assert set(first) == {"first"} and set(second) == {"first", "second"}
    m = doc["checks"][0]["metrics"]
    runs = m["control"]["comparisons"] + 1 + m["deterministic_runs"]
    assert first["first"] >= runs  # the first subject's verdict ran ...
    comparison_runs = 2 * len(m["comparison"]["cost"]["control_us"])
    assert second["first"] - first["first"] >= comparison_runs  # ... then its comparison
    assert built["first"].calls == second["first"]  # nothing of it after the second's verdict
    assert all(doc["timings"][n]["comparison_s"] > 0 for n in ("first", "second"))
