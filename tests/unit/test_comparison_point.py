"""The comparison point, measured by the harness wherever its walk goes, on CPU.

The workloads are fakes (``tests/fakesubjects.py``: real float32 reductions whose summation order
the test sets) because the real subjects need a CUDA GPU; the harness that walks, judges and
measures the comparison is the real one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from runner.inside import plan
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
    pin = {"config": "floats_small", "series": 3}
    walked_up = _three()
    high = _measure(walked_up, start_config="floats_large", compare_at=pin)
    assert high.config == "floats_large"  # detection at the remembered config ...
    assert walked_up.prepared == ["floats_large", "floats_small"]  # ... comparison at the pin
    here = _three()
    low = _measure(here, compare_at=pin)  # a walk from the smallest that stops at the pin
    assert low.config == "floats_small" and here.prepared == ["ints", "floats_small"]
    a, b = high.check["metrics"]["comparison"], low.check["metrics"]["comparison"]
    for doc in (a, b):
        assert doc["config_name"] == "floats_small" and doc["pinned"] and doc["series"] == 3
        assert doc["outputs"]["out"]["distinct"] == 1 and doc["cost"]["interleaved"]
        assert len(doc["cost"]["control_us"]) == len(doc["cost"]["deterministic_us"]) == 8
    assert a["digests"] == b["digests"]  # comparable across the two builds
    assert a["reused_workload"] is False and b["reused_workload"] is True
    assert high.phases["comparison_s"] > 0


@dataclass
class KnobLog(Reduction):
    knobs: list[bool] = field(default_factory=list)

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        self.knobs.append(knob)
        return super().run(knob)


def test_the_arms_are_interleaved_after_both_compile() -> None:
    made = {"walk": KnobLog(*floats(2048, 7)), "pin": KnobLog(*floats(4096, 8))}
    subject = FakeSubject(lambda n: made[n], names=("walk", "pin"))
    _measure(subject, compare_at={"config": "pin", "series": 1})
    # both warm-ups, untimed, then control/deterministic pairs whose order alternates
    assert made["pin"].knobs == [False, True] + [False, True, True, False] * 4


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
