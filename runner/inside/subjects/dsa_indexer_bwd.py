"""``dsa_indexer_bwd``: DeepSeek sparse attention's indexer backward, ``deterministic`` on and off.

``indexer_backward_wrapper(index_q, weights, index_k, attn_score, index_score, topk_indices,
grad_loss, ..., deterministic=)`` is the backward of the lightning indexer's KL loss over each
query's ``topk`` selected keys: the logit of key ``s`` for query ``t`` is
``z = sum_h weights[t, h] * relu(sm_scale * index_q[t, h] . index_k[s])``, ``index_score`` the
predicted distribution over those logits, ``attn_score`` the target. Kernel 1 turns the two into
the logits' gradient in place of ``attn_score``; kernel 2 (a GEMM) gives dQ and dW, each written by
one CTA, and dK, which every query that selected a key adds to: with the knob off in float32
atomics, with it on (1.32.0, sm_100/sm_103 only) into one private plane per producer CTA
(``deterministic_dk_planes``: 96, 128 or 148) that a last kernel folds in CTA order. On sm_90 the
knob must be refused (a frontend refusal row, ``core/frontend_refusals.py``).

The inputs make dK contended: thousands of queries, each selecting ``topk`` distinct keys of a few
thousand, so every key row takes hundreds of additions. dK is compared in float32 (the wrapper
takes an fp32 ``d_index_k`` and stores the accumulator itself), dQ and dW in bf16 as the kernel
writes them. Each run gives the kernel a fresh copy of ``attn_score``, which it overwrites.

The reference is the gradient written out in float32 (``indexer_reference``): the gradient
signal of the masked KL loss, then autograd through the logits, a chunk of queries at a time. It
is checked against the loss itself on CPU (autograd through ``-sum(t * log softmax(z))``) and a
bf16 emulation of the kernel's roundings stays inside its tolerances. Against the knob-off
kernel on an H100 (``bench/indexer_reference_sm90.py``, the same math on sm_90) it holds at the
two configs that kernel takes: at most 0.77 of a bound used, no element outside
(``docs/measurements/h100-2026-12-06.md``). Without an sm_100 GPU, the kernels are compiled for
sm_100a (``compile_target``): they compile lazily at their first launch, so each is driven up to
that compile and stopped there.
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
    name="dsa_indexer_bwd",
    entry_point="cudnn.deepseek_sparse_attention.indexer_backward_wrapper",
    knob="deterministic",
    families=("sm_100",),
    outputs={
        # bf16 stores of a float32 accumulation over topk keys (dS rounded to bf16 before it)
        "d_index_q": {"atol": 2e-2, "rtol": 2e-2},
        "d_weights": {"atol": 2e-2, "rtol": 2e-2},
        # float32, summed over every query and head that selected the key row
        "d_index_k": {"atol": 5e-2, "rtol": 2e-2},
    },
    compile_only=True,
    note="sm_100 only; on sm_90 deterministic=True must raise (frontend refusal row)",
    # batch, queries, keys, heads (the deterministic kernel: 32 or 64; D is 128), top-k per query,
    # and the deterministic dK planes (96, 128 or 148)
    configs=(
        (
            "b1_sq1024_sk2048_h64_topk512_p96",
            {"b": 1, "s_q": 1024, "s_k": 2048, "h": 64, "topk": 512, "planes": 96},
        ),
        (
            "b1_sq4096_sk8192_h32_topk1024_p128",
            {"b": 1, "s_q": 4096, "s_k": 8192, "h": 32, "topk": 1024, "planes": 128},
        ),
        (
            "b2_sq4096_sk16384_h64_topk2048_p148",
            {"b": 2, "s_q": 4096, "s_k": 16384, "h": 64, "topk": 2048, "planes": 148},
        ),
    ),
    history={
        "since": "1.32.0",
        "source": "registry wheels (core/surface_ledger.json)",
        "evidence": "indexer_backward_wrapper takes no deterministic in 1.30.0; 1.32.0: "
        "deterministic: bool = False, deterministic_dk_planes (96, 128, 148), sm_100/sm_103 only",
    },
)

CONFIGS = configs_of(DECLARATION)
# compiled for sm_100a at the smallest config (docs/determinism.md has the seconds)
COMPILE_CONFIG = CONFIGS[0].name
TOLERANCES = tolerances_of(DECLARATION)
D = 128
# the kernels' clip of a probability before its log (CLIP_LOG_MIN = -100.0 in 1.32.0)
CLIP_PROB_MIN = 3.720075976020836e-44


def shapes(params: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Each operand's shape and dtype, as the wrapper takes them (outputs last)."""
    b, s_q, s_k, h, topk = (params[k] for k in ("b", "s_q", "s_k", "h", "topk"))
    bf16, fp32 = torch.bfloat16, torch.float32
    return {
        "index_q": ((b, s_q, h, D), bf16),
        "weights": ((b, s_q, h), bf16),
        "index_k": ((b, s_k, D), bf16),
        "attn_score": ((b, s_q, topk), fp32),
        "index_score": ((b, s_q, topk), fp32),
        "topk_indices": ((b, s_q, topk), torch.int32),
        "d_index_q": ((b, s_q, h, D), bf16),
        "d_weights": ((b, s_q, h), bf16),
        "d_index_k": ((b, s_k, D), fp32),
    }


def inputs(params: dict[str, Any], device: torch.device, seed: int = 20261205) -> dict[str, Any]:
    """Seeded operands: each query's ``topk`` distinct keys (local ids), a target and a predicted
    distribution over them, ``grad_loss`` 1 and ``loss_coeff`` such that the gradient signal's
    scale (``loss_coeff / (b * s_q)``) is ``topk``: gradients of order one. Queries and keys lie
    on a grid where no logit is zero and every logit is exact: the relu's gate is then the same
    in the kernel and in the reference (with normal draws, the logits a summation order puts on
    the other side of zero moved dQ by up to 0.22 on an H100)."""
    gen = seeded(seed, device)
    spec = shapes(params)

    def randn(name: str, scale: float = 1.0) -> torch.Tensor:
        shape, dtype = spec[name]
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

    def on_grid(name: str) -> torch.Tensor:
        """About N(0, 1), on the quarter grid: the first coordinate an odd quarter, the others
        even ones, so every ``q . k`` is an odd multiple of 1/16, never zero, and exact in float32
        whatever the order of the sum (each partial sum a multiple of 1/16 below 2**17 / 16)."""
        shape, dtype = spec[name]
        a = torch.randn(*shape, generator=gen, device=device) * 2
        quarters = a.round() * 2
        quarters[..., 0] = a[..., 0].floor() * 2 + 1
        return (quarters / 4).to(dtype)

    b, s_q, s_k, h, topk = (params[k] for k in ("b", "s_q", "s_k", "h", "topk"))
    order = torch.rand(b * s_q, s_k, generator=gen, device=device).argsort(dim=1)
    idx = order[:, :topk].reshape(b, s_q, topk).to(torch.int32).contiguous()

    def distribution() -> torch.Tensor:
        return torch.randn(b, s_q, topk, generator=gen, device=device).softmax(dim=-1)

    return {
        "index_q": on_grid("index_q"),
        "weights": randn("weights", h**-0.5),
        "index_k": on_grid("index_k"),
        "attn_score": distribution(),
        "index_score": distribution(),
        "topk_indices": idx,
        "grad_loss": torch.ones(1, dtype=torch.float32, device=device),
        "sm_scale": D**-0.5,
        "loss_coeff": float(b * s_q * topk),
    }


def gradient_signal(target: torch.Tensor, predict: torch.Tensor, grad_scale: float) -> torch.Tensor:
    """The logits' gradient of ``-grad_scale * sum(t * log p)`` with ``p = softmax(z)`` given, as
    kernel 1 writes it: targets clipped from below, slots whose ``p`` is below the clip masked."""
    t = target.float().clamp_min(CLIP_PROB_MIN)
    p = predict.float()
    g = -t * (p >= CLIP_PROB_MIN).float() * grad_scale
    return g - p * g.sum(dim=-1, keepdim=True)


def logits(q: torch.Tensor, w: torch.Tensor, rows: torch.Tensor, sm_scale: float) -> torch.Tensor:
    """``z[b, t, j] = sum_h w[b, t, h] * relu(sm_scale * q[b, t, h] . rows[b, t, j])``."""
    s = sm_scale * torch.einsum("bthd,btjd->bthj", q, rows)
    return torch.einsum("bth,bthj->btj", w, torch.relu(s))


def indexer_reference(x: dict[str, Any], chunk: int = 256) -> dict[str, torch.Tensor]:
    """dQ, dW, dK in float32: the gradient signal back through the logits by autograd."""
    b, s_q = x["index_q"].shape[:2]
    signal = gradient_signal(x["attn_score"], x["index_score"], x["loss_coeff"] / (b * s_q))
    kf = x["index_k"].detach().float().requires_grad_()
    batch = torch.arange(b, device=kf.device).view(b, 1, 1)
    dq = torch.empty(x["index_q"].shape, dtype=torch.float32, device=kf.device)
    dw = torch.empty(x["weights"].shape, dtype=torch.float32, device=kf.device)
    for lo in range(0, s_q, chunk):
        part = slice(lo, lo + chunk)
        qc = x["index_q"][:, part].detach().float().requires_grad_()
        wc = x["weights"][:, part].detach().float().requires_grad_()
        rows = kf[batch, x["topk_indices"][:, part].long()]  # [b, c, topk, D]
        logits(qc, wc, rows, x["sm_scale"]).backward(signal[:, part])
        assert qc.grad is not None and wc.grad is not None
        dq[:, part], dw[:, part] = qc.grad, wc.grad
    assert kf.grad is not None
    return {"d_index_q": dq, "d_weights": dw, "d_index_k": kf.grad}


@dataclass
class IndexerWorkload(Prepared):
    def __post_init__(self) -> None:
        from cudnn.deepseek_sparse_attention import indexer_backward_wrapper

        self.fn = indexer_backward_wrapper
        self.x = inputs(self.config.params, self.device)

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        x, spec = self.x, shapes(self.config.params)
        shape, dtype = spec["d_index_k"]
        r = self.fn(
            x["index_q"], x["weights"], x["index_k"],
            x["attn_score"].clone(),  # the kernel overwrites it with the gradient signal
            x["index_score"], x["topk_indices"], x["grad_loss"],
            sm_scale=x["sm_scale"], loss_coeff=x["loss_coeff"],
            d_index_k=torch.empty(shape, dtype=dtype, device=self.device),
            deterministic=knob,
            deterministic_dk_planes=self.config.params["planes"] if knob else 96,
        )  # fmt: skip
        return {"d_index_q": r["d_index_q"], "d_weights": r["d_weights"],
                "d_index_k": r["d_index_k"]}  # fmt: skip

    def reference(self) -> dict[str, torch.Tensor]:
        return indexer_reference(self.x)


SUBJECT = Harness(DECLARATION, IndexerWorkload)


def compile_target(config: Config, knob: bool) -> tuple[Any, Any, list[Any]]:
    """For ``base.compile_only``: the plan built from fake CUDA tensors, then each kernel its
    launch would compile lazily: the GEMM (dK into the planes with the knob on, into one fp32
    accumulator with it off) and, with the knob on, the planes' fold."""
    from cudnn.deepseek_sparse_attention.indexer_backward import (
        api,
        deterministic_dk_sm100,
        indexer_backward_sm100,
    )

    p = config.params
    spec = shapes(p)
    iq, w, ik, attn, pred, idx, diq, dw, dik = fake_cuda(*spec.values())
    planes = p["planes"] if knob else 96
    (dk_planes,) = fake_cuda(((planes, p["b"] * p["s_k"], D), torch.float32))
    plan: list[Any] = []

    def build() -> None:
        obj = api.IndexerBackward(iq, w, ik, diq, dw, dik, attn, pred, idx, sm_scale=D**-0.5,
                                  deterministic=knob, deterministic_dk_planes=planes)  # fmt: skip
        if not obj.check_support():
            raise RuntimeError("IndexerBackward declined the config for sm_100")
        obj.compile()
        plan.append(obj._compiled_kernel)

    def gemm() -> None:
        build()
        plan[0].gemm_after_score(iq, w, ik, diq, dw, dk_planes if knob else dik, attn, idx)

    def fold() -> None:
        deterministic_dk_sm100.reduce_deterministic_dk(dk_planes, dik, planes)

    steps = [gemm, fold] if knob else [gemm]
    return steps, None, [api, indexer_backward_sm100, deterministic_dk_sm100]
