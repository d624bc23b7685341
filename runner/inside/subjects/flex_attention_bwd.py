"""``flex_attention_bwd``: ``cudnn.flex_attention.flex_attn_func(..., deterministic=)`` backward.

Causal attention as an interval-mask plan (K and V with ``h_kv`` heads where a config is
grouped-query): ``create_mask_plan`` takes ``mask_func`` of shape
``[Hmask, nfunc, total_q]`` (int32) whose endpoints give each query its visible sample-local key
intervals ``[0, F0) U [F1, F2) ...``; causal (top-left, equal lengths) is one function per query,
``F0 = i + 1`` for sample-local query ``i``. The plan is built once per config, with backward
payloads; each run clears the leaf gradients and runs forward and backward through autograd.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from core.subjects import Subject
from runner.inside.subjects.attention import attention_reference, kv_heads
from runner.inside.subjects.base import (
    Config,
    Harness,
    Prepared,
    configs_of,
    seeded,
    tolerances_of,
)

DECLARATION = Subject(
    name="flex_attention_bwd",
    entry_point="cudnn.flex_attention.flex_attn_func",
    knob="deterministic",
    families=("sm_90", "sm_100"),
    outputs={
        "dq": {"atol": 2e-2, "rtol": 2e-2},
        "dk": {"atol": 2e-2, "rtol": 2e-2},
        "dv": {"atol": 2e-2, "rtol": 2e-2},
    },
    compile_only=True,
    has="cudnn.flex_attention.flex_attn_func already takes 'deterministic'",
    lacks="the build has no cudnn.flex_attention.flex_attn_func taking 'deterministic'",
    # BSHD, bf16, causal. The middle one measured on an H200 (docs/determinism.md): knob
    # off, 6 of 7 differed.
    configs=(
        ("b1_s512_h8_d128_causal", {"b": 1, "s": 512, "h": 8, "d": 128}),
        ("b2_s2048_h16_d128_causal", {"b": 2, "s": 2048, "h": 16, "d": 128}),
        ("b4_s4096_h16_d128_causal", {"b": 4, "s": 4096, "h": 16, "d": 128}),
        # grouped-query (K, V with h_kv heads) and head dim 256: other kernels of the same
        # backward, after the walk's own (not measured yet: their CuTe DSL did not import in the
        # H200's run, docs/measurements/surface-sm90-2026-12-05a.txt)
        ("gqa_b4_s4096_hq32_hkv8_d128_causal", {"b": 4, "s": 4096, "h": 32, "h_kv": 8, "d": 128}),
        ("hd256_b4_s4096_h32_d256_causal", {"b": 4, "s": 4096, "h": 32, "d": 256}),
    ),
    history={
        "since": "1.29.0",
        "source": "NVIDIA/cudnn-frontend#775 'Add Flex Attention CuTe DSL kernels' "
        "(2026-08-27); 1.29.0 release notes (NVIDIA/cudnn-frontend#1025)",
        "evidence": "module cudnn.flex_attention absent in 1.3.0-1.28.0; present with "
        "deterministic: bool = False in 1.29.0-1.32.0",
    },
)

CONFIGS = configs_of(DECLARATION)
TOLERANCES = tolerances_of(DECLARATION)
# compiled for sm_100a at the smallest config: batch, sequence and heads are dynamic in the sm_100
# backward (b2 s2048 h16 gave the same PTX), head dim and grouping are not
COMPILE_CONFIG = CONFIGS[0].name


def causal_mask_func(b: int, s: int, device: torch.device) -> torch.Tensor:
    """The interval mask of top-left causal attention: query i sees keys [0, i + 1)."""
    ends = torch.arange(1, s + 1, dtype=torch.int32, device=device).repeat(b)
    return ends.view(1, 1, b * s).contiguous()


@dataclass
class FlexWorkload(Prepared):
    def __post_init__(self) -> None:
        from cudnn.flex_attention import create_mask_plan, flex_attn_func

        p = self.config.params
        b, s, h, d = p["b"], p["s"], p["h"], p["d"]
        gen = seeded(20260819, self.device)

        def leaf(*shape: int) -> torch.Tensor:
            t = torch.randn(*shape, generator=gen, device=self.device).to(torch.bfloat16)
            return t.requires_grad_()

        h_kv = kv_heads(p)
        self.q, self.k, self.v = leaf(b, s, h, d), leaf(b, s, h_kv, d), leaf(b, s, h_kv, d)
        self.d_o = torch.randn(b, s, h, d, generator=gen, device=self.device).to(torch.bfloat16)
        self.scale = 1.0 / math.sqrt(d)
        mask = causal_mask_func(b, s, self.device)
        self.plan: Any = create_mask_plan(mask, self.q, self.k, self.v, build_backward=True)
        self.fn = flex_attn_func

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        for t in (self.q, self.k, self.v):
            t.grad = None
        out = self.fn(self.q, self.k, self.v, mask_plan=self.plan, deterministic=knob)
        out.backward(self.d_o)
        grads = {"dq": self.q.grad, "dk": self.k.grad, "dv": self.v.grad}
        return {name: g.detach() for name, g in grads.items() if g is not None}

    def reference(self) -> dict[str, torch.Tensor]:
        bhsd = [t.detach().transpose(1, 2) for t in (self.q, self.k, self.v, self.d_o)]
        grads = attention_reference(*bhsd, causal=True, scale=self.scale)
        return {name: g.transpose(1, 2) for name, g in grads.items()}


# its kernels persist in this subdirectory of the compile cache, one set for every config:
# its deterministic arm compiled ahead in a process of its own when the cache is cold
# (``runner/inside/ahead.py``)
SUBJECT = Harness(DECLARATION, FlexWorkload, kernel_cache="flex")


def compile_target(config: Config, knob: bool) -> tuple[Any, Any, list[Any]]:
    """For ``base.compile_only``: the causal mask plan and the sm_100 backward's plan
    (``FlexAttentionBwd``) built and compiled in torch's fake mode, on tensors that say they live
    on a CUDA device. In fake mode the frontend compiles the plan's kernels without launching
    them and sizes the plan by its dense bound: the backward's compile reads only the plan
    tensors' dtypes, ranks and layouts, never their values. The kernels: the plan's, then the
    backward's preprocess, main kernel (the one the knob changes) and postprocesses."""
    from unittest import mock

    from cudnn.flex_attention import FlexAttentionBwd, create_mask_plan
    from cudnn.flex_attention.plan import builder
    from torch._subclasses.fake_tensor import FakeTensorMode

    p = config.params
    b, s, h, d = p["b"], p["s"], p["h"], p["d"]
    h_kv = kv_heads(p)

    def offsets(counts: torch.Tensor) -> torch.Tensor:
        # builder._exclusive_offsets writes offsets[0] = 0, which a torch without CUDA cannot do
        # to a fake CUDA tensor; in fake mode only the offsets' shape is read
        return torch.empty((counts.numel() + 1,), dtype=torch.int32, device=counts.device)

    def call() -> None:
        with (
            FakeTensorMode(allow_non_fake_inputs=True),
            mock.patch.object(builder, "_exclusive_offsets", offsets),
        ):

            def empty(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
                return torch.empty(*shape, dtype=dtype, device="cuda")

            q, o, d_o, dq = (empty(b, s, h, d) for _ in range(4))
            k, v, dk, dv = (empty(b, s, h_kv, d) for _ in range(4))
            mask = empty(1, 1, b * s, dtype=torch.int32)
            plan = create_mask_plan(mask, q, k, v, build_backward=True)
            lse = empty(b, h, s, dtype=torch.float32)
            bwd = FlexAttentionBwd(q, k, v, o, d_o, lse, dq, dk, dv, plan, deterministic=knob)
            if not bwd.check_support():
                raise RuntimeError("FlexAttentionBwd declined the config for sm_100")
            bwd.compile()

    return call, FlexAttentionBwd, []
