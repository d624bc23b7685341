"""The config walk that does not give up on one quiet sample, on CPU.

The workloads are fakes (``tests/fakesubjects.py``: real float32 reductions whose summation order
the test sets) because the real subjects need a CUDA GPU; the harness that walks and judges is
the real one.
"""

from __future__ import annotations

import torch

from runner.inside.measure import Settings, measure_subject
from tests.fakesubjects import FakeSubject, Reduction, floats, integers

CPU = torch.device("cpu")


def test_a_quiet_sample_at_the_top_config_walks_on_instead_of_ending_inconclusive() -> None:
    """The flapping sdpa_bwd verdict: the remembered config is the largest, and its control
    happened to be quiet in this build's first sample (variation comes in bursts)."""

    def make(_name: str) -> Reduction:
        # call 0 is the warm-up, calls 1-8 the first control sample: quiet; later calls vary
        return Reduction(*floats(4096, 31), shuffle_when=lambda call: call > 8)

    subject = FakeSubject(make, names=("small", "top"))
    out = measure_subject(subject, CPU, Settings(), start_config="top", start_from=12)
    assert out.check["status"] == "pass", out.check["detail"]
    metrics = out.check["metrics"]
    assert subject.prepared == ["top"]  # never shrank
    assert metrics["resampled_rounds"] == 1 and metrics["escalation_steps"] == 0
    assert metrics["control"] == {"varying": 8, "comparisons": 15, "share": round(8 / 15, 4)}
    assert metrics["start"]["outcome"] == "kept"
    assert "walked on at top: 8 more control runs (8 of 15" in metrics["config_reason"]
    assert metrics["escalation"][-1]["resampled"] is True


def test_a_control_that_never_varies_is_sampled_to_the_cap_and_stays_inconclusive() -> None:
    subject = FakeSubject(lambda _n: Reduction(*integers(4096)), names=("only",))
    out = measure_subject(subject, CPU, Settings(max_repeats=24))
    assert out.check["status"] == "inconclusive"
    metrics = out.check["metrics"]
    assert metrics["control"]["comparisons"] == 23  # 24 runs: bounded by max_repeats
    assert metrics["resampled_rounds"] == 2
