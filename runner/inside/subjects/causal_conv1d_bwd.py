"""``causal_conv1d_bwd``: ``cudnn.ops.causal_conv1d``'s backward (dx, dweight), knob the torch flag.

Depthwise causal convolution, bf16, width 4, SiLU, no bias, x channel-last (a [B, D, T] view of
[B, T, D] memory: the native route). The backward honours ``torch.use_deterministic_algorithms``
with a deterministic dweight schedule (1.29.0 on; #799 was its automatic schedule giving a
non-reproducible dW under the flag). Each run clears the gradients and runs forward and backward
with the flag as ``runner/inside/torchflag.py`` sets it. The op needs a cuDNN backend newer than
9.19 (``min_backend`` in ``core/subjects.py``). With a bias, the flag must refuse: that contract
is the frontend refusal rows' (``runner/inside/frontend_refusal.py``), not this subject's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from runner.inside.subjects.base import Config, Tolerance, configs_of, seeded
from runner.inside.torchflag import Arms

CONFIGS = configs_of("causal_conv1d_bwd")
# dweight sums over B x T products in float32 before its bf16 rounding
TOLERANCES = {"dx": Tolerance(atol=2e-2, rtol=2e-2), "dweight": Tolerance(atol=5e-1, rtol=5e-2)}
WIDTH = 4


def conv_reference(
    x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor
) -> dict[str, torch.Tensor]:
    """dx, dweight of silu(causal depthwise conv1d(x, weight)) in float32; x is [B, D, T]."""
    x32 = x.detach().float().requires_grad_()
    w32 = weight.detach().float().requires_grad_()
    dim = x32.shape[1]
    y = torch.nn.functional.conv1d(x32, w32.unsqueeze(1), padding=WIDTH - 1, groups=dim)
    y = torch.nn.functional.silu(y[..., : x32.shape[-1]])
    y.backward(dy.float())
    assert x32.grad is not None and w32.grad is not None
    return {"dx": x32.grad, "dweight": w32.grad}


@dataclass
class ConvWorkload:
    config: Config
    device: torch.device
    tolerances: dict[str, Tolerance] = field(default_factory=lambda: dict(TOLERANCES))
    arms: Arms = field(default_factory=Arms)

    def __post_init__(self) -> None:
        from cudnn.ops.causal_conv1d import causal_conv1d

        p = self.config.params
        b, t, dim = p["b"], p["t"], p["dim"]
        gen = seeded(20261207, self.device)

        def randn(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=gen, device=self.device).to(torch.bfloat16)

        self.base = randn(b, t, dim).requires_grad_()  # [B, T, D] memory
        self.weight = randn(dim, WIDTH).requires_grad_()
        self.dy = randn(b, dim, t)
        self.fn = causal_conv1d

    def _once(self) -> dict[str, torch.Tensor]:
        self.base.grad = None
        self.weight.grad = None
        y = self.fn(self.base.transpose(1, 2), self.weight, None, activation="silu")
        y.backward(self.dy)
        out: dict[str, torch.Tensor] = {}
        if self.base.grad is not None:  # dx as [B, D, T], the layout the op was given
            out["dx"] = self.base.grad.detach().transpose(1, 2)
        if self.weight.grad is not None:
            out["dweight"] = self.weight.grad.detach()
        return out

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        return self.arms.run(knob, self._once)

    def reference(self) -> dict[str, torch.Tensor]:
        return conv_reference(self.base.detach().transpose(1, 2), self.weight, self.dy)


class CausalConv1dBwd:
    name = "causal_conv1d_bwd"
    configs = CONFIGS

    def prepare(self, config: Config, device: torch.device) -> ConvWorkload:
        return ConvWorkload(config, device)


SUBJECT = CausalConv1dBwd()
