"""A made-up subject for tests, whole in one file: its declaration and its harness.

It stands in for a new frontend knob (no such entry point exists in any frontend release), with
``toy_frontend.py`` as the build's entry point. ``FE_CI_EXTRA_SUBJECTS`` naming this folder adds
it to the registry; a copy of this file in ``runner/inside/subjects/`` adds it as a built-in
subject is added.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.subjects import Subject
from runner.inside.subjects.base import Config, Tolerance, configs_of, seeded, tolerances_of

DECLARATION = Subject(
    name="toy_sum_bwd",
    entry_point="toy_frontend.sum_bwd",
    knob="deterministic",
    families=("sm_90",),
    outputs={"dx": {"atol": 1e-2, "rtol": 1e-4}},
    configs=(("n4096", {"n": 4096}), ("n65536", {"n": 65536})),
    history={"since": "1.99.0", "source": "made up for tests", "evidence": "none"},
)

CONFIGS = configs_of(DECLARATION)
TOLERANCES = tolerances_of(DECLARATION)


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
    name = DECLARATION.name
    configs = CONFIGS

    def prepare(self, config: Config, device: torch.device) -> ToyWorkload:
        return ToyWorkload(config, device)


SUBJECT = ToySumBwd()
