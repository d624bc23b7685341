"""``sdpa_torch_bwd``: ``cudnn.sdpa_torch``'s backward through autograd, knob the torch flag.

``cudnn.sdpa_torch`` is the ``cudnn::sdpa_fwd`` torch op; its registered autograd backward calls
``torch.ops.cudnn.sdpa_bwd`` with ``is_deterministic=torch.are_deterministic_algorithms_enabled()``
(1.29.0 on). Each run clears the leaf gradients and runs forward and backward (bf16, causal) with
the flag as ``runner/inside/torchflag.py`` sets it: off for the control arm, on and
``warn_only=True`` in turn for the deterministic arm, restored after every run. This subject's
configs are dense BHSD; the packed ragged sequences (``cu_seqlens``) are ``sdpa_torch_thd_bwd``'s,
whose workload is this one (its ``thd`` configs: the reference is the dense float32 backward of
each sequence on its own).

One subject per path, because a walk settles at one config: the op's dense and packed backwards
are separate code in the frontend, each of which must pass the flag, and cudnn-frontend #837 was
the dense one dropping it. With both in one walk, a build whose walk settled at a packed config
never ran the dense path with the flag on (on an H100, the #837 plant passed that way:
``docs/measurements/h100-stream-2026-12-05g.txt``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from core.subjects import Subject
from runner.inside.subjects.attention import (
    attention_reference,
    cu_seqlens,
    packed_reference,
    shapes,
)
from runner.inside.subjects.base import Harness, Prepared, configs_of, seeded, tolerances_of
from runner.inside.torchflag import Arms

DECLARATION = Subject(
    name="sdpa_torch_bwd",
    entry_point="cudnn.sdpa.fwd.torch_op._sdpa_backward",
    knob="torch_flag",
    families=("sm_90", "sm_100"),
    # bf16 gradients against a float32 computation from the same bf16 inputs, as sdpa_bwd's.
    outputs={
        "dq": {"atol": 2e-2, "rtol": 2e-2},
        "dk": {"atol": 2e-2, "rtol": 2e-2},
        "dv": {"atol": 2e-2, "rtol": 2e-2},
    },
    # 1.28.0's cudnn::sdpa op (cudnn.experimental.ops) has a backward that never reads the flag:
    # the probe finds it there and says the knob is absent.
    alternates=("cudnn.experimental.ops.sdpa._sdpa_backward",),
    note="cudnn.sdpa_torch's autograd backward; control: flag off, deterministic arm: flag "
    "on, its runs alternating with warn_only=True",
    backward_of="cudnn.sdpa_torch",
    # Small to large, dense BHSD, causal (the packed THD path: sdpa_torch_thd_bwd).
    configs=(
        ("b1_h8_s512_d64_causal", {"layout": "bhsd", "b": 1, "h": 8, "s": 512, "d": 64}),
        ("b4_h16_s2048_d128_causal", {"layout": "bhsd", "b": 4, "h": 16, "s": 2048, "d": 128}),
        ("b4_h16_s4096_d128_causal", {"layout": "bhsd", "b": 4, "h": 16, "s": 4096, "d": 128}),
        ("b8_h16_s4096_d128_causal", {"layout": "bhsd", "b": 8, "h": 16, "s": 4096, "d": 128}),
    ),
    history={
        "since": "1.29.0",
        "source": "registry wheels; cudnn-frontend #837 (review caught the dense autograd path "
        "dropping the flag)",
        "evidence": "1.28.0: cudnn.experimental.ops.sdpa._sdpa_backward (the cudnn::sdpa op's "
        "autograd backward) never reads torch.are_deterministic_algorithms_enabled(); "
        "1.29.0-1.32.0: cudnn.sdpa.fwd.torch_op._sdpa_backward passes "
        "is_deterministic=torch.are_deterministic_algorithms_enabled() on the dense path "
        "(this subject) and the packed THD path (sdpa_torch_thd_bwd)",
    },
)

CONFIGS = configs_of(DECLARATION)
TOLERANCES = tolerances_of(DECLARATION)
NAMES = tuple(DECLARATION.outputs)


@dataclass
class SdpaTorchWorkload(Prepared):
    arms: Arms = field(default_factory=Arms)

    def __post_init__(self) -> None:
        import cudnn

        shape, self.lens = shapes(self.config.params)
        self.scale = 1.0 / math.sqrt(shape[-1])
        gen = seeded(20261205, self.device)

        def randn() -> torch.Tensor:
            return torch.randn(*shape, generator=gen, device=self.device).to(torch.bfloat16)

        self.q, self.k, self.v = (randn().requires_grad_() for _ in range(3))
        self.d_o = randn()
        self.kwargs: dict[str, Any] = {"is_causal": True, "return_lse": True}
        if self.lens is not None:
            cu = cu_seqlens(self.lens, self.device)
            self.kwargs.update(
                cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(self.lens),
                max_seqlen_kv=max(self.lens),
            )  # fmt: skip
        self.fn = cudnn.sdpa_torch

    def _step(self, forward: Callable[..., torch.Tensor]) -> dict[str, torch.Tensor]:
        """The leaves' gradients after ``forward(q, k, v)`` and its backward from ``d_o``."""
        leaves = (self.q, self.k, self.v)
        for t in leaves:
            t.grad = None
        forward(*leaves).backward(self.d_o)
        return {
            n: t.grad.detach() for n, t in zip(NAMES, leaves, strict=True) if t.grad is not None
        }

    def _once(self) -> dict[str, torch.Tensor]:
        return self._step(lambda q, k, v: self.fn(q, k, v, **self.kwargs)[0])

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        return self.arms.run(knob, self._once)

    def reference(self) -> dict[str, torch.Tensor]:
        q, k, v, d_o = (t.detach() for t in (self.q, self.k, self.v, self.d_o))
        if self.lens is None:
            return attention_reference(q, k, v, d_o, causal=True, scale=self.scale)
        return packed_reference(q, k, v, d_o, self.lens, scale=self.scale)


# cuDNN compiles its engines' kernels in every process: built ahead at the comparison point in a
# process beside the stage (``runner/inside/ahead.py``), they reach this one through the CUDA
# driver's cache
SUBJECT = Harness(DECLARATION, SdpaTorchWorkload, compiled_per_process=True)
