"""bench/gpu_surface.py's graph-API sections: ``pygraph.sdpa_backward`` configs built directly (GQA,
dBias), and ``pygraph.sdpa_fp8_backward``, each with ``use_deterministic_algorithm`` off and on.

The forward runs once per config to give O and the softmax statistics (for FP8 they are computed
in float32 from the dequantised inputs); each run is one execution of a prebuilt backward graph
into zeroed outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from bench.gpu_surface_kit import Ctx, Outputs, arms, attention_reference, record_error

SEED = 20261206


def _graph(cudnn: Any, handle: Any, io: Any) -> Any:
    return cudnn.pygraph(
        io_data_type=io,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        handle=handle,
    )


def _build(cudnn: Any, g: Any) -> Any:
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g


def _handle(cudnn: Any) -> Any:
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    return handle


def direct(
    ctx: Ctx, b: int, h: int, h_kv: int, s: int, d: int, bias: bool
) -> Callable[[bool], Outputs]:
    """A causal bf16 backward built directly on the graph API; with ``bias``, a [1, H, S, S] bias
    whose gradient dBias is an output too. Returns ``run(knob)``."""
    import cudnn

    handle = _handle(cudnn)
    bf16 = cudnn.data_type.BFLOAT16
    scale = d**-0.5
    q, d_o = ctx.randn(b, h, s, d, seed=SEED), ctx.randn(b, h, s, d, seed=SEED + 3)
    k, v = ctx.randn(b, h_kv, s, d, seed=SEED + 1), ctx.randn(b, h_kv, s, d, seed=SEED + 2)
    o = torch.empty_like(q)
    stats = torch.empty(b, h, s, 1, dtype=torch.float32, device=ctx.device)
    bias_t = ctx.randn(1, h, s, s, seed=SEED + 4) * 0.5 if bias else None
    bufs = {"dq": torch.empty_like(q), "dk": torch.empty_like(k), "dv": torch.empty_like(v)}
    if bias_t is not None:
        bufs["dbias"] = torch.empty_like(bias_t)

    g = _graph(cudnn, handle, bf16)
    tq, tk, tv = (g.tensor_like(t) for t in (q, k, v))
    tb = g.tensor_like(bias_t) if bias_t is not None else None
    to, ts = g.sdpa(
        q=tq,
        k=tk,
        v=tv,
        generate_stats=True,
        attn_scale=scale,
        bias=tb,
        diagonal_band_right_bound=0,
    )
    to.set_output(True).set_dim(o.size()).set_stride(o.stride())
    ts.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(stats.size()).set_stride(
        stats.stride()
    )
    fwd = _build(cudnn, g)
    io = {tq: q, tk: k, tv: v, to: o, ts: stats}
    if tb is not None:
        io[tb] = bias_t
    graphs: dict[bool, tuple[Any, dict[Any, torch.Tensor]]] = {}
    for knob in (False, True):
        g = _graph(cudnn, handle, bf16)
        tq, tk, tv, to, tdo = (g.tensor_like(t) for t in (q, k, v, o, d_o))
        ts = g.tensor_like(stats)
        extra: dict[str, Any] = {}
        bio: dict[Any, torch.Tensor] = {}
        if bias_t is not None:
            extra = {"bias": g.tensor_like(bias_t), "dBias": g.tensor_like(bufs["dbias"])}
            bio = {extra["bias"]: bias_t, extra["dBias"]: bufs["dbias"]}
        tdq, tdk, tdv = g.sdpa_backward(
            q=tq,
            k=tk,
            v=tv,
            o=to,
            dO=tdo,
            stats=ts,
            attn_scale=scale,
            diagonal_band_right_bound=0,
            use_deterministic_algorithm=knob,
            **extra,
        )
        for name, t in (("dq", tdq), ("dk", tdk), ("dv", tdv)):
            t.set_output(True).set_dim(bufs[name].size()).set_stride(bufs[name].stride())
        graphs[knob] = (
            _build(cudnn, g),
            {
                tq: q,
                tk: k,
                tv: v,
                to: o,
                tdo: d_o,
                ts: stats,
                tdq: bufs["dq"],
                tdk: bufs["dk"],
                tdv: bufs["dv"],
                **bio,
            },
        )
    sizes = [fwd.get_workspace_size()] + [gr.get_workspace_size() for gr, _ in graphs.values()]
    workspace = torch.empty(max(sizes), dtype=torch.uint8, device=ctx.device)
    fwd.execute(io, workspace, handle=handle)

    def run(knob: bool) -> Outputs:
        for buf in bufs.values():
            buf.zero_()
        gr, gio = graphs[knob]
        gr.execute(gio, workspace, handle=handle)
        return {n: t.clone() for n, t in bufs.items()}

    run.inputs = (q, k, v, d_o, scale)  # type: ignore[attr-defined]
    return run


def sec_pygraph_sdpa(ctx: Ctx) -> None:
    """``pygraph.sdpa_backward(use_deterministic_algorithm=)`` built directly: GQA and dBias."""
    ep = "pygraph.sdpa_backward"
    for cfg, (b, h, h_kv, s, d, bias) in {
        "gqa_b4_h16_hkv4_s2048_d128_causal": (4, 16, 4, 2048, 128, False),
        "dbias_b2_h16_s1024_d128_causal": (2, 16, 16, 1024, 128, True),
    }.items():
        try:
            run = direct(ctx, b, h, h_kv, s, d, bias)
        except Exception as exc:
            record_error(ctx.results, ep, cfg, "build", exc)
            continue
        q, k, v, d_o, scale = run.inputs  # type: ignore[attr-defined]
        ref = None if bias else attention_reference(q, k, v, d_o, causal=True, scale=scale)
        arms(ctx, ep, cfg, run, ref)


def fp8(ctx: Ctx, b: int, h: int, s: int, d: int) -> Callable[[bool], Outputs]:
    """``sdpa_fp8_backward``: FP8 E4M3 Q/K/V/dO, bf16 O and gradients, every scale 1, causal; O and
    the statistics from a float32 forward over the same FP8 values. Returns ``run(knob)``."""
    import cudnn

    handle = _handle(cudnn)
    e4m3, f8 = cudnn.data_type.FP8_E4M3, torch.float8_e4m3fn
    scale = d**-0.5
    q, k, v, d_o = (
        ctx.randn(b, h, s, d, seed=SEED + 10 + i, dtype=torch.float32).to(f8) for i in range(4)
    )
    scores = scale * q.float() @ k.float().transpose(-1, -2)
    scores.masked_fill_(torch.ones(s, s, dtype=torch.bool, device=ctx.device).triu(1), -math.inf)
    stats = torch.logsumexp(scores, dim=-1, keepdim=True).contiguous()
    o = (torch.softmax(scores, dim=-1) @ v.float()).to(torch.bfloat16)
    del scores
    one = torch.ones(1, 1, 1, 1, dtype=torch.float32, device=ctx.device)
    bufs = {
        n: torch.empty(b, h, s, d, dtype=torch.bfloat16, device=ctx.device)
        for n in ("dq", "dk", "dv")
    }
    amax = {
        n: torch.empty(1, 1, 1, 1, dtype=torch.float32, device=ctx.device)
        for n in ("dq", "dk", "dv", "dp")
    }
    scalars = (
        "descale_q",
        "descale_k",
        "descale_v",
        "descale_o",
        "descale_dO",
        "descale_s",
        "descale_dP",
        "scale_s",
        "scale_dQ",
        "scale_dK",
        "scale_dV",
        "scale_dP",
    )
    graphs: dict[bool, tuple[Any, dict[Any, torch.Tensor]]] = {}
    for knob in (False, True):
        g = _graph(cudnn, handle, e4m3)

        def t(x: torch.Tensor, dt: Any, g: Any = g) -> Any:
            return g.tensor(dim=list(x.shape), stride=list(x.stride()), data_type=dt)

        tq, tk, tv, tdo = (t(x, e4m3) for x in (q, k, v, d_o))
        to, ts = t(o, cudnn.data_type.BFLOAT16), t(stats, cudnn.data_type.FLOAT)
        sc = {n: t(one, cudnn.data_type.FLOAT) for n in scalars}
        outs = g.sdpa_fp8_backward(
            q=tq,
            k=tk,
            v=tv,
            o=to,
            dO=tdo,
            stats=ts,
            attn_scale=scale,
            use_causal_mask=True,
            use_deterministic_algorithm=knob,
            **sc,
        )
        gio: dict[Any, torch.Tensor] = {tq: q, tk: k, tv: v, tdo: d_o, to: o, ts: stats}
        gio.update({x: one for x in sc.values()})
        for name, tt in zip(("dq", "dk", "dv"), outs[:3], strict=True):
            tt.set_output(True).set_dim(list(bufs[name].shape)).set_stride(
                list(bufs[name].stride())
            )
            tt.set_data_type(cudnn.data_type.BFLOAT16)
            gio[tt] = bufs[name]
        for name, tt in zip(("dq", "dk", "dv", "dp"), outs[3:], strict=True):
            tt.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(
                cudnn.data_type.FLOAT
            )
            gio[tt] = amax[name]
        graphs[knob] = (_build(cudnn, g), gio)
    workspace = torch.empty(
        max(gr.get_workspace_size() for gr, _ in graphs.values()),
        dtype=torch.uint8,
        device=ctx.device,
    )

    def run(knob: bool) -> Outputs:
        for buf in bufs.values():
            buf.zero_()
        gr, gio = graphs[knob]
        gr.execute(gio, workspace, handle=handle)
        return {n: x.clone() for n, x in bufs.items()} | {
            f"amax_{n}": x.clone() for n, x in amax.items()
        }

    return run


def sec_sdpa_fp8(ctx: Ctx) -> None:
    """``pygraph.sdpa_fp8_backward(use_deterministic_algorithm=)``: does the knob change bytes?"""
    for cfg, (b, h, s, d) in {"b2_h16_s2048_d128_causal": (2, 16, 2048, 128)}.items():
        try:
            run = fp8(ctx, b, h, s, d)
        except Exception as exc:
            record_error(ctx.results, "pygraph.sdpa_fp8_backward", cfg, "build", exc)
            continue
        arms(ctx, "pygraph.sdpa_fp8_backward", cfg, run, None)


SECTIONS: dict[str, Callable[[Ctx], None]] = {
    "pygraph_sdpa": sec_pygraph_sdpa,
    "sdpa_fp8": sec_sdpa_fp8,
}
