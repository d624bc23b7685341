"""Fake subjects for the determinism harness: real float32 reductions on CPU, no cuDNN.

A fake stands in for a subject because the real ones need a CUDA GPU (and the grouped GEMMs a
Blackwell one); what the harness does with the outputs is real. A matrix-vector product reduces
in a seeded permutation of its columns: with the "knob" honoured the order is fixed; without it
each call draws a new order, which changes the rounding and so the bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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
