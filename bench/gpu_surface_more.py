"""bench/gpu_surface.py's sections outside SDPA: causal conv1d under the torch flag and its refusal
contract, DeepSeek sparse attention's backward refusals, the indexer's top-k tie order, and flex
attention's GQA and head-dim-256 variants. The last three need the CuTe DSL (``cutlass``); without
it their import fails and the record says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from bench.gpu_surface_kit import (
    Ctx,
    Outputs,
    arms,
    attention_reference,
    expect_raise,
    flag_arms,
    measure_arm,
    record,
    record_error,
    torch_flag,
)

SEED = 20261207


def _conv_case(ctx: Ctx, b: int, t: int, dim: int, *, bias: bool, channel_last: bool = True) -> Any:
    """Leaves and a ``run()`` for causal_conv1d forward + backward, SiLU, width 4, bf16.

    Channel-last x (a [B, D, T] view of [B, T, D] memory) is what the native route takes;
    contiguous [B, D, T] goes to the generic cuDNN route."""
    from cudnn.ops.causal_conv1d import _get_causal_conv1d_last_route, causal_conv1d

    base = ctx.randn(b, t, dim, seed=SEED) if channel_last else ctx.randn(b, dim, t, seed=SEED)
    base.requires_grad_()
    w = ctx.randn(dim, 4, seed=SEED + 1).requires_grad_()
    bias_t = ctx.randn(dim, seed=SEED + 2).requires_grad_() if bias else None
    dy = ctx.randn(b, dim, t, seed=SEED + 3)
    routes: set[str] = set()

    def forward() -> torch.Tensor:
        for leaf in (base, w, bias_t):
            if leaf is not None:
                leaf.grad = None
        x = base.transpose(1, 2) if channel_last else base
        y = causal_conv1d(x, w, bias_t, activation="silu")
        routes.add(str(_get_causal_conv1d_last_route()))
        return y

    def grads() -> Outputs:
        out = {"dx": base.grad, "dweight": w.grad}
        if bias_t is not None:
            out["dbias"] = bias_t.grad
        return {n: g for n, g in out.items() if g is not None}

    def run() -> Outputs:
        forward().backward(dy)
        return grads()

    def run_flag_at_backward_only() -> Outputs:
        y = forward()
        with torch_flag("on"):
            y.backward(dy)
        return grads()

    return run, run_flag_at_backward_only, routes


def sec_causal_conv1d(ctx: Ctx) -> None:
    """``cudnn.ops.causal_conv1d`` backward under the torch flag; bias + flag must raise."""
    ep = "cudnn.ops.causal_conv1d (autograd backward)"
    for cfg, (b, t, dim) in {
        "b4_t8192_d2048_w4_silu_channel_last": (4, 8192, 2048),
        "b2_t2048_d1024_w4_silu_channel_last": (2, 2048, 1024),
    }.items():
        try:
            run, run_bwd_only, routes = _conv_case(ctx, b, t, dim, bias=False)
        except Exception as exc:
            record_error(ctx.results, ep, cfg, "setup", exc)
            continue
        flag_arms(ctx, ep, cfg, run, None)
        record(
            ctx.results,
            ep,
            cfg,
            "flag_on_at_backward_only",
            lambda f=run_bwd_only: measure_arm(f, ctx.runs, ctx.deadline)[0],
        )
        record(ctx.results, ep, cfg, "routes", lambda r=routes: {"routes": sorted(r)})
    cfg = "b2_t2048_d1024_w4_silu_channel_last_bias"
    try:
        run, _, routes = _conv_case(ctx, 2, 2048, 1024, bias=True)
        for arm, mode, expected in (
            ("bias_flag_on", "on", RuntimeError),
            ("bias_flag_warn_only", "warn_only", RuntimeWarning),
        ):

            def refusal(
                mode: str = mode, expected: type[BaseException] = expected
            ) -> dict[str, Any]:
                def call() -> None:
                    with torch_flag(mode):
                        run()

                return expect_raise(call, expected) | {"routes": sorted(routes)}

            record(ctx.results, ep, cfg, arm, refusal)
        record(
            ctx.results,
            ep,
            cfg,
            "bias_flag_off",
            lambda: measure_arm(run, min(ctx.runs, 6), ctx.deadline, flag="off")[0],
        )
    except Exception as exc:
        record_error(ctx.results, ep, cfg, "setup", exc)
    cfg = "b2_t2048_d1024_w4_silu_contiguous_bdt_generic_route"
    try:
        run, _, routes = _conv_case(ctx, 2, 2048, 1024, bias=False, channel_last=False)
        record(
            ctx.results,
            ep,
            cfg,
            "flag_off_once",
            lambda: expect_raise(run, RuntimeError) | {"routes": sorted(routes)},
        )
    except Exception as exc:
        record_error(ctx.results, ep, cfg, "setup", exc)


def sec_dsa(ctx: Ctx) -> None:
    """DeepSeek sparse attention and indexer backward wrappers: ``deterministic=True`` on sm_90
    must raise ValueError; ``deterministic=False`` runs (control variation)."""
    import cudnn.deepseek_sparse_attention as dsa

    ep = "cudnn.deepseek_sparse_attention.sparse_attention_backward_wrapper"
    s_q, s_kv, h, topk = 256, 2048, 16, 256
    cfg = f"sq{s_q}_skv{s_kv}_h{h}_d576_topk{topk}_bf16"
    gen = torch.Generator(device=ctx.device).manual_seed(SEED)
    q, kv = ctx.randn(s_q, h, 576, seed=SEED), ctx.randn(s_kv, 576, seed=SEED + 1)
    out, dout = ctx.randn(s_q, h, 512, seed=SEED + 2), ctx.randn(s_q, h, 512, seed=SEED + 3)
    lse = torch.full((s_q, h), 6.0, dtype=torch.float32, device=ctx.device)
    sink = ctx.randn(h, seed=SEED + 4, dtype=torch.float32)
    idx = torch.rand(s_q, s_kv, generator=gen, device=ctx.device).argsort(dim=1)[:, :topk]
    idx = idx.to(torch.int32).contiguous()

    def sparse(det: bool) -> Outputs:
        r = dsa.sparse_attention_backward_wrapper(
            q, kv, out, dout, lse, sink, idx, deterministic=det
        )
        return {n: r[n] for n in ("dq", "dkv", "d_sink")}

    record(
        ctx.results,
        ep,
        cfg,
        "deterministic_true",
        lambda: expect_raise(lambda: sparse(True), ValueError),
    )
    record(
        ctx.results,
        ep,
        cfg,
        "deterministic_false",
        lambda: measure_arm(lambda: sparse(False), min(ctx.runs, 8), ctx.deadline)[0],
    )

    ep = "cudnn.deepseek_sparse_attention.indexer_backward_wrapper"
    b, sq, sk, hh, d, k = 1, 256, 2048, 32, 128, 256
    cfg = f"b{b}_sq{sq}_sk{sk}_h{hh}_d{d}_topk{k}"
    iq, w = ctx.randn(b, sq, hh, d, seed=SEED + 5), ctx.randn(b, sq, hh, seed=SEED + 6)
    ik = ctx.randn(b, sk, d, seed=SEED + 7)
    attn0 = torch.softmax(ctx.randn(b, sq, k, seed=SEED + 8, dtype=torch.float32), dim=-1)
    iscore = torch.softmax(ctx.randn(b, sq, k, seed=SEED + 9, dtype=torch.float32), dim=-1)
    tk = torch.rand(b, sq, sk, generator=gen, device=ctx.device).argsort(dim=2)[..., :k]
    tk = tk.to(torch.int32).contiguous()
    grad_loss = torch.ones(1, dtype=torch.float32, device=ctx.device)

    def indexer(det: bool) -> Outputs:
        r = dsa.indexer_backward_wrapper(
            iq, w, ik, attn0.clone(), iscore, tk, grad_loss, deterministic=det
        )
        return {n: r[n] for n in ("d_index_q", "d_weights", "d_index_k")}

    record(
        ctx.results,
        ep,
        cfg,
        "deterministic_true",
        lambda: expect_raise(lambda: indexer(True), ValueError),
    )
    record(
        ctx.results,
        ep,
        cfg,
        "deterministic_false",
        lambda: measure_arm(lambda: indexer(False), min(ctx.runs, 8), ctx.deadline)[0],
    )


def sec_indexer_top_k(ctx: Ctx) -> None:
    """``indexer_top_k_wrapper(deterministic=)`` under heavy ties: is the output order stable?"""
    import cudnn.deepseek_sparse_attention as dsa

    ep = "cudnn.deepseek_sparse_attention.indexer_top_k_wrapper"
    rows, cols, top_k = 64, 8192, 512
    gen = torch.Generator(device=ctx.device).manual_seed(SEED)
    values = torch.randint(
        0, 8, (rows, cols), generator=gen, device=ctx.device
    ).float()  # ~1000 ties a level
    seq_lens = torch.full((rows,), cols, dtype=torch.int32, device=ctx.device)

    def run(det: bool) -> Outputs:
        r = dsa.indexer_top_k_wrapper(values, seq_lens, top_k, deterministic=det)
        return {"indices": r["indices"], "values": r["values"]}

    arms(ctx, ep, f"rows{rows}_cols{cols}_topk{top_k}_fp32_8levels", run, None)

    def ascending() -> dict[str, Any]:
        idx = run(True)["indices"]
        valid = idx.masked_fill(idx < 0, torch.iinfo(idx.dtype).max)
        return {
            "det_indices_ascending_per_row": bool((valid[:, 1:] >= valid[:, :-1]).all()),
            "det_indices_unique_per_row": bool(
                all(torch.unique(r[r >= 0]).numel() == int((r >= 0).sum()) for r in idx)
            ),
        }

    record(
        ctx.results, ep, f"rows{rows}_cols{cols}_topk{top_k}_fp32_8levels", "det_order", ascending
    )


def sec_flex(ctx: Ctx) -> None:
    """``cudnn.flex_attention.flex_attn_func(deterministic=)``: GQA, head dim 256, causal BSHD."""
    from cudnn.flex_attention import create_mask_plan, flex_attn_func

    ep = "cudnn.flex_attention.flex_attn_func (autograd backward)"
    for cfg, (b, s, h, h_kv, d) in {
        "gqa_b2_s2048_hq16_hkv4_d128_causal": (2, 2048, 16, 4, 128),
        "hd256_b1_s2048_h8_d256_causal": (1, 2048, 8, 8, 256),
    }.items():
        if ctx.deadline.passed():
            record_error(
                ctx.results, ep, cfg, "-", TimeoutError("section deadline passed before it")
            )
            continue
        try:
            q = ctx.randn(b, s, h, d, seed=SEED).requires_grad_()
            k, v = (ctx.randn(b, s, h_kv, d, seed=SEED + i).requires_grad_() for i in (1, 2))
            d_o = ctx.randn(b, s, h, d, seed=SEED + 3)
            ends = torch.arange(1, s + 1, dtype=torch.int32, device=ctx.device).repeat(b)
            plan = create_mask_plan(
                ends.view(1, 1, b * s).contiguous(), q, k, v, build_backward=True
            )
        except Exception as exc:
            record_error(ctx.results, ep, cfg, "plan", exc)
            continue

        def run(knob: bool, q=q, k=k, v=v, d_o=d_o, plan=plan) -> Outputs:  # type: ignore[no-untyped-def]
            for t in (q, k, v):
                t.grad = None
            flex_attn_func(q, k, v, mask_plan=plan, deterministic=knob).backward(d_o)
            return {"dq": q.grad, "dk": k.grad, "dv": v.grad}

        bhsd = [t.detach().transpose(1, 2) for t in (q, k, v, d_o)]
        ref = {
            n: g.transpose(1, 2)
            for n, g in attention_reference(*bhsd, causal=True, scale=d**-0.5).items()
        }
        arms(ctx, ep, cfg, run, ref)


SECTIONS: dict[str, Callable[[Ctx], None]] = {
    "causal_conv1d": sec_causal_conv1d,
    "dsa": sec_dsa,
    "indexer_top_k": sec_indexer_top_k,
    "flex": sec_flex,
}
