"""The harness side of the made-up ``toy_sum_bwd`` subject (see ``extra_subjects.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from runner.inside.subjects.base import Config, Tolerance, configs_of, seeded

CONFIGS = configs_of("toy_sum_bwd")
TOLERANCES = {"dx": Tolerance(atol=1e-2, rtol=1e-4)}


@dataclass
class ToyWorkload:
    config: Config
    device: torch.device
    tolerances: dict[str, Tolerance] = field(default_factory=lambda: dict(TOLERANCES))

    def __post_init__(self) -> None:
        from toy_frontend import sum_bwd

        self.fn = sum_bwd
        gen = seeded(16, self.device)
        self.x = torch.randn(self.config.params["n"], generator=gen, device=self.device)

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        return {"dx": self.fn(self.x, deterministic=knob)}

    def reference(self) -> dict[str, torch.Tensor]:
        return {"dx": self.x.double().sum().reshape(1)}


class ToySumBwd:
    name = "toy_sum_bwd"
    configs = CONFIGS

    def prepare(self, config: Config, device: torch.device) -> ToyWorkload:
        return ToyWorkload(config, device)


SUBJECT = ToySumBwd()
