"""``dsa_sparse_attention_bwd``: DeepSeek sparse attention's backward, ``deterministic`` on and off.

``sparse_attention_backward_wrapper(q, kv, out, dout, lse, attn_sink, topk_idxs, deterministic=)``
is MQA attention over a latent KV of 576 columns (K is all of it, V its first 512), each query
attending to its own ``topk`` selected KV rows, with a per-head sink logit in the softmax's
denominator. With the knob on, its sm_100 kernels give bitwise-reproducible dQ, dKV (H16 to H128);
on sm_90 the knob must be refused (a frontend refusal row, ``core/frontend_refusals.py``).

On an sm_100 GPU the forward runs once (the frontend's native ``sparse_attention``) for O and the
KV-only natural-log LSE, and each run is one backward call. The reference is the same attention
written out in float32 (a chunk of queries at a time, through autograd): it is checked against a
dense masked formulation on CPU, but has not yet been held against the kernel on an sm_100 GPU.
Without one, its sm_100a kernels are compiled (``compile_target``: the kernel class itself, on
fake CUDA tensors, since the wrapper insists on a CUDA device).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from core.subjects import Subject
from runner.inside.subjects.base import (
    Config,
    Harness,
    Prepared,
    configs_of,
    fake_cuda,
    seeded,
    tolerances_of,
)

DECLARATION = Subject(
    name="dsa_sparse_attention_bwd",
    entry_point="cudnn.deepseek_sparse_attention.sparse_attention_backward_wrapper",
    knob="deterministic",
    families=("sm_100",),
    outputs={
        "dq": {"atol": 2e-2, "rtol": 2e-2},
        "dkv": {"atol": 5e-2, "rtol": 2e-2},  # sums over every query that selected the row
        "d_sink": {"atol": 1e-2, "rtol": 1e-2},
    },
    compile_only=True,
    note="sm_100 only; on sm_90 deterministic=True must raise (frontend refusal row)",
    # queries, KV rows, heads (the deterministic kernels: 16 to 128), top-k per query
    configs=(
        ("sq256_skv2048_h64_topk256", {"s_q": 256, "s_kv": 2048, "h": 64, "topk": 256}),
        ("sq1024_skv8192_h128_topk512", {"s_q": 1024, "s_kv": 8192, "h": 128, "topk": 512}),
        ("sq4096_skv16384_h128_topk2048", {"s_q": 4096, "s_kv": 16384, "h": 128, "topk": 2048}),
    ),
    history={
        "since": "1.29.0",
        "source": "registry wheels (core/surface_ledger.json)",
        "evidence": "sparse_attention_backward_wrapper absent before 1.29.0; "
        "deterministic: bool = False in 1.29.0-1.32.0",
    },
)

CONFIGS = configs_of(DECLARATION)
# compiled for sm_100a at the smallest config: on a 2-core host its two kernels took 9.2 s and
# 7.6 s, against 74.0 s and 36.6 s at h128 top-k 512 (docs/determinism.md)
COMPILE_CONFIG = CONFIGS[0].name
TOLERANCES = tolerances_of(DECLARATION)
D_QK, D_V = 576, 512


def shapes(params: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Each operand's shape and dtype, as the backward takes them."""
    s_q, s_kv, h, topk = params["s_q"], params["s_kv"], params["h"], params["topk"]
    bf16, fp32 = torch.bfloat16, torch.float32
    return {
        "q": ((s_q, h, D_QK), bf16),
        "kv": ((s_kv, D_QK), bf16),
        "out": ((s_q, h, D_V), bf16),
        "dout": ((s_q, h, D_V), bf16),
        "lse": ((s_q, h), fp32),
        "sink": ((h,), fp32),
        "idx": ((s_q, topk), torch.int32),
    }


def inputs(params: dict[str, Any], device: torch.device, seed: int = 20261205) -> dict[str, Any]:
    """Q, KV, dO, the sink logits and each query's ``topk`` distinct KV rows, seeded."""
    gen = seeded(seed, device)
    spec = shapes(params)

    def randn(name: str, scale: float = 1.0) -> torch.Tensor:
        shape, dtype = spec[name]
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

    s_q, s_kv, topk = params["s_q"], params["s_kv"], params["topk"]
    order = torch.rand(s_q, s_kv, generator=gen, device=device).argsort(dim=1)
    return {
        "q": randn("q"),
        "kv": randn("kv"),
        "dout": randn("dout"),
        "sink": randn("sink"),
        "idx": order[:, :topk].to(torch.int32).contiguous(),
        "scale": D_QK**-0.5,
    }


def dsa_reference(
    q: torch.Tensor,
    kv: torch.Tensor,
    idx: torch.Tensor,
    sink: torch.Tensor,
    dout: torch.Tensor,
    scale: float,
    chunk: int = 128,
) -> dict[str, torch.Tensor]:
    """dQ, dKV, dSink of ``out[i, h] = sum_t p[i, h, t] V[idx[i, t]]`` in float32, where
    ``p = softmax([scale * q[i, h] . K[idx[i, t]] for t] + [sink[h]])`` without the sink's slot."""
    kvf = kv.detach().float().requires_grad_()
    sinkf = sink.detach().float().requires_grad_()
    dq = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for lo in range(0, q.shape[0], chunk):
        qc = q[lo : lo + chunk].detach().float().requires_grad_()
        rows = kvf[idx[lo : lo + chunk].long()]  # [c, topk, 576]
        scores = scale * torch.einsum("chd,ctd->cht", qc, rows)
        sinks = sinkf.view(1, -1, 1).expand(scores.shape[0], -1, 1)
        p = torch.softmax(torch.cat([scores, sinks], dim=-1), dim=-1)[..., :-1]
        out = torch.einsum("cht,ctd->chd", p, rows[..., :D_V])
        out.backward(dout[lo : lo + chunk].float())
        assert qc.grad is not None
        dq[lo : lo + chunk] = qc.grad
    assert kvf.grad is not None and sinkf.grad is not None
    return {"dq": dq, "dkv": kvf.grad, "d_sink": sinkf.grad}


@dataclass
class DsaWorkload(Prepared):
    def __post_init__(self) -> None:
        from cudnn.deepseek_sparse_attention import (
            sparse_attention,
            sparse_attention_backward_wrapper,
        )

        self.fn = sparse_attention_backward_wrapper
        self.x = inputs(self.config.params, self.device)
        x = self.x
        with torch.no_grad():
            fwd = sparse_attention(x["q"], x["kv"], x["idx"], attn_sink=x["sink"],
                                   softmax_scale=x["scale"])  # fmt: skip
        self.out, self.lse = fwd["out"], fwd["lse"]

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        x = self.x
        r = self.fn(x["q"], x["kv"], self.out, x["dout"], self.lse, x["sink"], x["idx"],
                    softmax_scale=x["scale"], deterministic=knob)  # fmt: skip
        return {"dq": r["dq"], "dkv": r["dkv"], "d_sink": r["d_sink"]}

    def reference(self) -> dict[str, torch.Tensor]:
        x = self.x
        return dsa_reference(x["q"], x["kv"], x["idx"], x["sink"], x["dout"], x["scale"])


SUBJECT = Harness(DECLARATION, DsaWorkload)


def compile_target(config: Config, knob: bool) -> tuple[Any, Any, list[Any]]:
    """For ``base.compile_only``: the kernel class built and compiled from fake CUDA tensors."""
    from cudnn.deepseek_sparse_attention.sparse_attention_backward import api

    spec = shapes(config.params)
    q, kv, out, dout, lse, sink, idx = fake_cuda(*spec.values())

    def call() -> None:
        obj = api.SparseAttentionBackward(
            sample_q=q, sample_kv=kv, sample_out=out, sample_dout=dout, sample_lse=lse,
            sample_attn_sink=sink, sample_topk_idxs=idx, sample_topk_length=None,
            softmax_scale=D_QK**-0.5, block_tile=64, deterministic=knob, q_cluster_mode="off",
        )  # fmt: skip
        if not obj.check_support():
            raise RuntimeError("SparseAttentionBackward declined the config for sm_100")
        obj.compile()

    return call, api.SparseAttentionBackward, [api]
