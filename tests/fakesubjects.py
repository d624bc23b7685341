"""Fake subjects for the determinism harness: real float32 reductions on CPU, no cuDNN.

A fake stands in for a subject because the real ones need a CUDA GPU (and the grouped GEMMs a
Blackwell one); what the harness does with the outputs is real. A matrix-vector product reduces
in a seeded permutation of its columns: with the "knob" honoured the order is fixed; without it
each call draws a new order, which changes the rounding and so the bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import torch

from runner.inside.subjects.base import Config, Tolerance


@dataclass
class Reduction:
    """out[i] = sum_j w[i, j] * x[j], summed in an order the test chooses per call."""

    w: torch.Tensor
    x: torch.Tensor
    honours_knob: bool = True
    # given the call number (warm-ups included), should the knob-off order be shuffled?
    shuffle_when: Callable[[int], bool] = lambda _call: True
    calls: int = 0
    tolerances: dict[str, Tolerance] = field(
        default_factory=lambda: {"out": Tolerance(atol=1e-4, rtol=1e-4)}
    )

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        call, self.calls = self.calls, self.calls + 1
        n = self.x.numel()
        if (knob and self.honours_knob) or not self.shuffle_when(call):
            order = torch.arange(n)
        else:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(1000 + call))
        return {"out": (self.w[:, order] * self.x[order]).sum(dim=1)}

    def reference(self) -> dict[str, torch.Tensor]:
        return {"out": (self.w.double() @ self.x.double()).float()}


def floats(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(64, n, generator=gen), torch.randn(n, generator=gen)


def integers(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    # small integers: every partial sum is exact in float32, so no order changes the result
    gen = torch.Generator().manual_seed(7)
    w = torch.randint(-3, 4, (64, n), generator=gen).float()
    return w, torch.randint(-3, 4, (n,), generator=gen).float()


@dataclass
class FakeSubject:
    """A subject made of Reduction workloads; ``make`` builds one per config name."""

    make: Callable[[str], Reduction]
    names: tuple[str, ...] = ("only",)
    name: str = "cpu_reduction"
    prepared: list[str] = field(default_factory=list)

    @property
    def configs(self) -> tuple[Config, ...]:
        return tuple(Config(n, {"size": i}) for i, n in enumerate(self.names))

    def prepare(self, config: Config, device: torch.device) -> Reduction:
        self.prepared.append(config.name)
        return self.make(config.name)


SDPA_CONFIGS = (  # sdpa_bwd's dense config names (core/subjects.py): the service checks them
    "b1_h8_s512_d64_causal",
    "b4_h16_s2048_d128_causal",
    "b4_h16_s4096_d128_causal",
    "b8_h16_s4096_d128_causal",
)
H200 = {"gpu": "NVIDIA H200", "torch": torch.__version__, "cudnn_backend": "91100"}


def posted_stage(
    subject: str,
    names: tuple[str, ...],
    varies: Collection[str],
    *,
    start: str | None = None,
    compare_at: dict[str, Any] | None = None,
    nudge: float = 0.0,
    ratio: float | None = None,
    rarely: bool = False,
) -> dict[str, Any]:
    """The determinism stage an sm_90 runner posts for ``subject``, from a real CPU measurement
    (``measure_subject`` on Reduction workloads, one per config name): the control varies only
    at the configs in ``varies`` (elsewhere its order never changes), so the walk from ``start``
    goes where the test says. ``compare_at`` is the lease's comparison point; ``nudge`` moves the
    inputs' first value (every config's bytes change); ``ratio`` sets the comparison's cost;
    ``rarely``: the control varies in one call of nine only (in fewer than half its comparisons,
    so no comparison point is chosen from it)."""
    from runner.inside import bits
    from runner.inside.measure import Settings, measure_subject

    def make(name: str) -> Reduction:
        w, x = floats(4096, 21 + names.index(name))
        x[0] += nudge
        # quiet: the knob-off order never changes, the knob-on bytes are the same as when it does
        return Reduction(
            w, x, shuffle_when=lambda call: name in varies and (not rarely or call % 9 == 5)
        )

    fake = FakeSubject(make, names=names, name=subject)
    out = measure_subject(
        fake, torch.device("cpu"), Settings(), start_config=start, compare_at=compare_at
    )
    check = out.check
    compared = check["metrics"]["comparison"]
    compared["comparable"] = bits.comparable(
        subject, compared["config_name"], "sm_90", H200, "inputs-v1"
    )
    if ratio is not None:
        compared["cost"]["ratio"] = ratio
    return {"name": "determinism", "status": check["status"], "checks": [check], "drift": out.drift}
