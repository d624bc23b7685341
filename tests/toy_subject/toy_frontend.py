"""A made-up frontend entry point with a determinism knob, for tests (no GPU kernel exists here).

Like an atomics reduction, the default path adds 64 float32 partial sums in an order that changes
from call to call, so its bytes vary; ``deterministic=True`` adds them in one fixed order.
"""

from __future__ import annotations

import torch


def sum_bwd(x: torch.Tensor, *, deterministic: bool | None = None) -> torch.Tensor:
    partials = x.reshape(64, -1).sum(dim=1)
    order = range(64) if deterministic else torch.randperm(64).tolist()
    total = torch.zeros((), dtype=torch.float32)
    for i in order:
        total = total + partials[i]
    return total.reshape(1)
