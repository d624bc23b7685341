"""``grouped_gemm_dsrelu``: the MXFP8 grouped-GEMM dSReLU backward, ``deterministic`` on and off.

Inputs are those of a fused grouped MLP's FC2 backward: tokens routed to ``experts`` experts in
uneven numbers, each expert's rows padded to a multiple of 256 (``padded_offsets`` holds each
expert's padded end), padding rows zero, per-token routing probabilities, the upstream gradient
(A, ``[tokens, hidden]``) and the FC2 weights (B, ``[ffn, hidden, experts]``) quantized to
float8 e4m3 with one power-of-two scale per 32 values (E8M0, in the 128x4 blocked layout the
kernel reads), and C, the FC1 output of the forward pass, in bf16. The kernel computes
``G = A @ B_e^T`` per expert and reduces ``dprob[t] = sum_n relu(C)^2 * G`` across N-tiles (and
``dbias[e, n]``, the column sums of ``dC = 2 * prob * relu(C) * G``); with the knob off those
reductions are cross-CTA atomics. The configs span several 256-wide N-tiles; the seed measured
16 experts x 1024 tokens at n=2048 as the shape where every run differs.

Building inputs and the reference are plain torch (tested on CPU); the wrapper runs on sm_100.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from core.subjects import Subject
from runner.inside.subjects.base import Config, Harness, Prepared, configs_of, seeded, tolerances_of

DECLARATION = Subject(
    name="grouped_gemm_dsrelu",
    entry_point="cudnn.grouped_gemm_dsrelu_wrapper_sm100",
    knob="deterministic",
    families=("sm_100",),
    outputs={
        "dprob": {"atol": 1e-1, "rtol": 1e-2},  # float32 output, fp32 accumulation
        "dbias": {"atol": 1e-1, "rtol": 3e-2},  # bf16 output, bf16 per-M-block partials
    },
    note="default None follows torch.use_deterministic_algorithms",
    compile_only=True,
    activation="srelu",
    consumer_class="GroupedMLP_CuTeGEMMUnary",
    # MXFP8 grouped GEMMs: a fused grouped MLP's FC2 backward; every config spans at least two
    # 256-wide N-tiles, and the seed's 16 experts x 1024 tokens at n=2048 is one of them.
    configs=(
        ("e4_t256_n512_k1024", {"experts": 4, "tokens": 256, "n": 512, "k": 1024}),
        ("e8_t1024_n2048_k1024", {"experts": 8, "tokens": 1024, "n": 2048, "k": 1024}),
        ("e16_t1024_n2048_k1024", {"experts": 16, "tokens": 1024, "n": 2048, "k": 1024}),
        ("e16_t2048_n4096_k1024", {"experts": 16, "tokens": 2048, "n": 4096, "k": 1024}),
    ),
    history={
        "since": "1.28.0",
        "source": "NVIDIA/cudnn-frontend#521 (merged 2026-08-17; develop bumped to 1.28.0 by "
        "#668 on 2026-08-19); NVIDIA/TransformerEngine#3407",
        "evidence": "wrapper first shipped in 1.23.0 without the parameter; absent in "
        "1.23.0-1.27.0; present with default None in 1.28.0-1.32.0",
    },
)

SF_VEC = 32  # MXFP8: one E8M0 scale per 32 values along K
M_ALIGNED = 256
FP8_MAX = 448.0  # largest finite float8 e4m3fn

CONFIGS = configs_of(DECLARATION)  # the same shapes as grouped_gemm_dglu
TOLERANCES = tolerances_of(DECLARATION)


def tokens_per_expert(experts: int, tokens: int, seed: int = 5) -> list[int]:
    """Uneven routing around ``tokens`` per expert (+-25%), as a real router produces."""
    gen = torch.Generator().manual_seed(seed)
    spread = max(tokens // 4, 1)
    return [
        max(1, tokens + int(d))
        for d in torch.randint(-spread, spread + 1, (experts,), generator=gen)
    ]


def padded_layout(counts: list[int], aligned: int = M_ALIGNED) -> tuple[list[int], torch.Tensor]:
    """Each expert's rows padded to ``aligned``: (padded sizes, int32 end offsets)."""
    sizes = [-(-c // aligned) * aligned for c in counts]
    ends = torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32)
    return sizes, ends


def quantize_mxfp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``[..., K]`` -> (float8 e4m3 values, power-of-two scales ``[..., K/32]``)."""
    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // SF_VEC, SF_VEC)
    amax = blocks.abs().amax(dim=-1).clamp_min(2.0**-100)
    scale = torch.exp2(torch.ceil(torch.log2(amax / FP8_MAX)))
    q = (blocks / scale.unsqueeze(-1)).to(torch.float8_e4m3fn)
    return q.reshape(x.shape), scale


def dequantize_mxfp8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    blocks = q.float().reshape(*q.shape[:-1], q.shape[-1] // SF_VEC, SF_VEC)
    return (blocks * scale.unsqueeze(-1)).reshape(q.shape)


def blocked_scales(scale: torch.Tensor) -> torch.Tensor:
    """``[L, rows, K/32]`` scales -> E8M0 view ``(32, 4, rows/128, 4, K/128, L)``.

    The storage is ``(L, rows/128, K/128, 32, 4, 4)``: within a 128-row, 4-column atom, row
    ``32 * i4 + i32`` and column ``k4`` sit at offset ``16 * i32 + 4 * i4 + k4``.
    """
    lanes, rows, cols = scale.shape
    rm, rk = -(-rows // 128), -(-cols // 4)
    padded = torch.ones(lanes, rm * 128, rk * 4, dtype=torch.float32, device=scale.device)
    padded[:, :rows, :cols] = scale
    storage = padded.view(lanes, rm, 4, 32, rk, 4).permute(0, 1, 4, 3, 2, 5).contiguous()
    return storage.to(torch.float8_e8m0fnu).permute(3, 4, 1, 5, 2, 0)


def unblocked_scales(blocked: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The inverse of ``blocked_scales``: ``[L, rows, cols]`` float32."""
    storage = blocked.permute(5, 2, 4, 0, 1, 3).float()  # (L, rm, rk, 32, 4, 4)
    lanes, rm, rk = storage.shape[:3]
    flat = storage.permute(0, 1, 4, 3, 2, 5).reshape(lanes, rm * 128, rk * 4)
    return flat[:, :rows, :cols]


@dataclass
class MoeInputs:
    """One grouped-GEMM backward's operands, device-resident, with what the reference needs."""

    counts: list[int]
    sizes: list[int]
    a: torch.Tensor  # (m, k, 1) fp8, k-major
    b: torch.Tensor  # (n, k, experts) fp8, k-major
    sfa: torch.Tensor
    sfb: torch.Tensor
    c: torch.Tensor  # (m, c_width, 1) bf16
    prob: torch.Tensor  # (m, 1, 1) float32, 0 on padding rows
    padded_offsets: torch.Tensor  # (experts,) int32 end offsets
    alpha: torch.Tensor
    beta: torch.Tensor
    norm_const: torch.Tensor
    a_ref: torch.Tensor = field(repr=False, default_factory=lambda: torch.empty(0))
    b_ref: torch.Tensor = field(repr=False, default_factory=lambda: torch.empty(0))

    @property
    def valid_m(self) -> int:
        return sum(self.sizes)

    def gemm_reference(self) -> torch.Tensor:
        """G = dequant(A) @ dequant(B_e)^T per expert, float32 ``[m, n]``."""
        out = torch.zeros(self.valid_m, self.b_ref.shape[1], device=self.a_ref.device)
        start = 0
        for e, size in enumerate(self.sizes):
            out[start : start + size] = self.a_ref[start : start + size] @ self.b_ref[e].T
            start += size
        return out


def build_moe_inputs(
    params: dict[str, Any], device: torch.device, *, c_width: int, seed: int
) -> MoeInputs:
    experts, n, k = params["experts"], params["n"], params["k"]
    counts = tokens_per_expert(experts, params["tokens"], seed)
    sizes, ends = padded_layout(counts)
    m = sum(sizes)
    gen = seeded(seed, device)
    real = torch.zeros(m, dtype=torch.bool, device=device)
    start = 0
    for count, size in zip(counts, sizes, strict=True):
        real[start : start + count] = True
        start += size
    grad = torch.randn(m, k, generator=gen, device=device) * 0.1 * real[:, None]
    weight = torch.randn(experts, n, k, generator=gen, device=device) * 0.05
    qa, sa = quantize_mxfp8(grad)
    qb, sb = quantize_mxfp8(weight)
    c = torch.randn(m, c_width, generator=gen, device=device) * real[:, None]
    prob = torch.rand(m, generator=gen, device=device) * 0.9 + 0.1
    return MoeInputs(
        counts=counts,
        sizes=sizes,
        a=qa.unsqueeze(0).permute(1, 2, 0),
        b=qb.permute(1, 2, 0),
        sfa=blocked_scales(sa.unsqueeze(0)),
        sfb=blocked_scales(sb),
        c=c.to(torch.bfloat16).unsqueeze(0).permute(1, 2, 0),
        prob=(prob * real).view(m, 1, 1),
        padded_offsets=ends.to(device),
        alpha=torch.ones(experts, device=device),
        beta=torch.ones(experts, device=device),
        norm_const=torch.ones(1, device=device),
        a_ref=dequantize_mxfp8(qa, sa),
        b_ref=dequantize_mxfp8(qb, sb),
    )


def dsrelu_reference(x: MoeInputs) -> dict[str, torch.Tensor]:
    g = x.gemm_reference()
    c = x.c[:, :, 0].float()
    relu = torch.relu(c)
    d_c = 2.0 * x.prob[:, :, 0] * relu * g
    dbias = torch.stack([part.sum(dim=0) for part in torch.split(d_c, x.sizes, dim=0)]).unsqueeze(
        -1
    )
    return {"dprob": (relu * relu * g).sum(dim=1).view(-1, 1, 1), "dbias": dbias}


WRAPPER_KWARGS: dict[str, Any] = {
    "mma_tiler_mn": (256, 256),
    "sf_vec_size": SF_VEC,
    "discrete_col_sfd": True,
}


def dsrelu_kwargs(x: MoeInputs, knob: bool) -> dict[str, Any]:
    """The wrapper's arguments for ``x`` (dprob and dbias generated), the knob as given."""
    return {
        "a_tensor": x.a, "b_tensor": x.b, "c_tensor": x.c, "sfa_tensor": x.sfa,
        "sfb_tensor": x.sfb, "padded_offsets": x.padded_offsets, "alpha_tensor": x.alpha,
        "prob_tensor": x.prob, "generate_dbias": True, "norm_const_tensor": x.norm_const,
        "d_dtype": torch.float8_e4m3fn, "deterministic": knob, **WRAPPER_KWARGS,
    }  # fmt: skip


@dataclass
class DsreluWorkload(Prepared):
    def __post_init__(self) -> None:
        from cudnn import grouped_gemm_dsrelu_wrapper_sm100

        self.fn = grouped_gemm_dsrelu_wrapper_sm100
        self.x = build_moe_inputs(
            self.config.params, self.device, c_width=self.config.params["n"], seed=1028
        )

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        # dprob_tensor None: the wrapper allocates a zeroed one per call
        out = self.fn(**dsrelu_kwargs(self.x, knob), dprob_tensor=None)
        return {"dprob": out["dprob_tensor"], "dbias": out["dbias_tensor"]}

    def reference(self) -> dict[str, torch.Tensor]:
        return dsrelu_reference(self.x)


SUBJECT = Harness(DECLARATION, DsreluWorkload)


def compile_target(config: Config, knob: bool) -> tuple[Any, Any, list[Any]]:
    """For ``base.compile_only``: the wrapper call, its kernel class and modules to answer for."""
    from cudnn.gemm.cutedsl.grouped.dsrelu import api

    x = build_moe_inputs(config.params, torch.device("cpu"), c_width=config.params["n"], seed=1028)

    def call() -> Any:
        return api.grouped_gemm_dsrelu_wrapper_sm100(**dsrelu_kwargs(x, knob))

    return call, api.GroupedGemmDsreluSm100, [api]
