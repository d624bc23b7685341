"""``causal_conv1d_bwd``: ``cudnn.ops.causal_conv1d``'s backward (dx, dweight), knob the torch flag.

Depthwise causal convolution, bf16, width 4, SiLU, no bias, x channel-last (a [B, D, T] view of
[B, T, D] memory: the native route). The backward honours ``torch.use_deterministic_algorithms``
with a deterministic dweight schedule (1.29.0 on; #799 was its automatic schedule giving a
non-reproducible dW under the flag). Each run clears the gradients and runs forward and backward
with the flag as ``runner/inside/torchflag.py`` sets it. The op needs a cuDNN backend newer than
9.19 (``min_backend`` in its declaration). With a bias, the flag must refuse: that contract
is the frontend refusal rows' (``runner/inside/frontend_refusal.py``), not this subject's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.subjects import Subject
from runner.inside.subjects.base import Harness, Prepared, configs_of, seeded, tolerances_of
from runner.inside.torchflag import Arms

DECLARATION = Subject(
    name="causal_conv1d_bwd",
    entry_point="cudnn.ops.causal_conv1d._run_causal_conv1d_bulk_backend",
    knob="torch_flag",
    families=("sm_90", "sm_100"),
    outputs={
        "dx": {"atol": 2e-2, "rtol": 2e-2},
        # dweight sums over B x T products in float32 before its bf16 rounding
        "dweight": {"atol": 5e-1, "rtol": 5e-2},
    },
    note="cudnn.ops.causal_conv1d's autograd backward, bf16, width 4, SiLU, channel-last x, "
    "no bias; with a bias the flag must refuse (frontend refusal rows)",
    backward_of="cudnn.ops.causal_conv1d",
    # The H200's cuDNN 9.19.0 has no cudnnCausalConv1dForward (1.32.0 raises "Unable to find
    # symbol"); 9.20.0 is the lower bound that evidence allows, not a measured first release.
    min_backend="9.20.0",
    configs=(
        ("b2_t2048_d1024_w4_silu", {"b": 2, "t": 2048, "dim": 1024}),
        ("b4_t4096_d2048_w4_silu", {"b": 4, "t": 4096, "dim": 2048}),
        ("b4_t8192_d2048_w4_silu", {"b": 4, "t": 8192, "dim": 2048}),
    ),
    history={
        "since": "1.29.0",
        "source": "registry wheels; cudnn-frontend #799 (the automatic schedule's "
        "non-reproducible dW under the flag)",
        "evidence": "cudnn.ops.causal_conv1d absent in 1.28.0; 1.29.0-1.32.0: "
        "_run_causal_conv1d_bulk_backend reads torch.are_deterministic_algorithms_enabled() for "
        "its dweight schedule, and the docstring says a call with bias raises (warns under "
        "warn_only=True)",
    },
)

CONFIGS = configs_of(DECLARATION)
TOLERANCES = tolerances_of(DECLARATION)
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
class ConvWorkload(Prepared):
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


SUBJECT = Harness(DECLARATION, ConvWorkload)
