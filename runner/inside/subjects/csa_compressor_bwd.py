"""``csa_compressor_bwd``: the CSA/HCA compressor backward, ``deterministic`` on and off.

``csa_compressor_backward_wrapper(kv, score, ape, cu_seqlens, cu_seqlens_comp, grad_out, ratio=,
coff=, deterministic=)`` is the backward of the compressor's gated-softmax pooling over THD packed
segments (``cudnn.csa.compressor``, ported from Megatron-LM): block ``b`` of ``ratio`` tokens of
a segment pools ``out[b, j] = sum_k kv[w(b, k), c(k, j)] * softmax_k(score[w(b, k), c(k, j)] +
ape[k % ratio, c(k, j)])``. With ``coff == 2`` (the production CSA/HCA form, ``kv`` and ``score``
``coff * head_dim`` wide) the window is ``2 * ratio`` entries: ``k < ratio`` is the previous
block's token ``tok0 - ratio + k`` at the first-half column ``j`` (invalid, score ``-inf`` and kv
0, for each segment's first block), ``k >= ratio`` the block's own token ``tok0 + k - ratio`` at
the second-half column ``head_dim + j`` (``compressor_sm100.py``'s kernels). One kernel gives
dKV and dScore, disjoint stores in both arms, and dAPE, which every block adds to: with the knob
off one fp32 atomic per ``(k, column)`` per CTA of 8 blocks; with it on (1.32.0) a CTA-local
partial plane per CTA in a workspace the wrapper allocates, which a fixed-order fold (at ratio 4
two kernels, 32-partial groups then their sums) writes into dAPE.

The inputs make dAPE contended: segments of thousands of tokens, so each of its
``ratio * coff * head_dim`` entries takes one addition from each of 256 CTAs (the smallest
config) to 768 (the others), and the fold has 8 to 24 groups. Each segment is 2 tokens longer
than a multiple of ``ratio`` (tails the kernel zeroes). Only ratio 4, ``coff == 2`` is walked: ratio
2 folds serially, ratio 128 runs other kernels (``compressor_sm100_r128.py``); each would be a
subject of its own. dKV and dScore are compared in bf16 as the kernel stores them, dAPE in fp32.

The reference (``csa_reference``) is the gradient written out in float32: the windows gathered by
token index, the softmax's backward by hand, the window gradients put back at their tokens and
summed into dAPE's rows. It is checked on CPU against float64 autograd through the forward written
the eager way (each segment reshaped into blocks, the previous block's half shifted in), and a
float32 emulation of the kernel (its expression tree, its bf16 stores, its per-CTA dAPE sums)
stays inside the tolerances; it has not been held against the kernel on an sm_100 GPU. Without
that GPU the kernels are compiled for sm_100a (``compile_target``).
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
    name="csa_compressor_bwd",
    entry_point="cudnn.csa_compressor_backward_wrapper",
    knob="deterministic",
    families=("sm_100",),
    outputs={
        # fp32 arithmetic, one final bf16 rounding (api.py's numerics contract): half a bf16 ulp
        # is at most 2**-8 relative, a rounding that a few fp32 ulps flip at most 2**-7; atol
        # where dScore's p * dp and p * S cancel (fp32 residue ~1e-6)
        "grad_kv": {"atol": 1e-3, "rtol": 2e-2},
        "grad_score": {"atol": 1e-3, "rtol": 2e-2},
        # fp32, a sum over every block of the pack (2048 to 6144 terms of order one, entries up
        # to ~50) in an order of the kernel's: the emulated kernel order moves it by 3.3e-5 at
        # most at the largest config (1.5% of this bound); a lost CTA partial moves it by ~1
        "grad_ape": {"atol": 1e-3, "rtol": 1e-4},
    },
    compile_only=True,
    note="sm_100 only; ratio 4, coff 2 (the production CSA/HCA form): the two-kernel dAPE fold",
    # b segments of t tokens each (t % ratio == 2: every segment has a tail), head_dim dim,
    # compression ratio and coff (2: the overlapping window); 1x and 3x 8192-token packs
    configs=(
        ("b4_t2050_dim128_r4_coff2", {"b": 4, "t": 2050, "dim": 128, "ratio": 4, "coff": 2}),
        ("b3_t8194_dim128_r4_coff2", {"b": 3, "t": 8194, "dim": 128, "ratio": 4, "coff": 2}),
        ("b3_t8194_dim512_r4_coff2", {"b": 3, "t": 8194, "dim": 512, "ratio": 4, "coff": 2}),
    ),
    history={
        "since": "1.32.0",
        "source": "registry wheels (core/surface_ledger.json)",
        "evidence": "csa_compressor_backward_wrapper (cudnn.csa, since 1.28.0) takes no "
        "deterministic in 1.28.0-1.31.0, whose backward refuses torch's deterministic mode "
        "(dAPE fp32 atomics); 1.32.0: deterministic: bool = False, partial planes and a "
        "fixed-order fold",
    },
)

CONFIGS = configs_of(DECLARATION)
# compiled for sm_100a at the smallest config (the kernels are keyed by ratio, dim, coff only)
COMPILE_CONFIG = CONFIGS[0].name
TOLERANCES = tolerances_of(DECLARATION)
OUTPUTS = ("grad_kv", "grad_score", "grad_ape")
# blocks per backward CTA (compressor_sm100._BWD_ROWS): one dAPE partial per CTA
ROWS_PER_CTA = 8


def seqlens(params: dict[str, Any]) -> list[int]:
    """Each segment's token count: ``params["lens"]`` where given, else ``b`` segments of ``t``."""
    if "lens" in params:
        return [int(n) for n in params["lens"]]
    return [int(params["t"])] * int(params["b"])


def shapes(params: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Each operand's shape and dtype, in the wrapper's order (its outputs last)."""
    lens, ratio, coff, dim = seqlens(params), params["ratio"], params["coff"], params["dim"]
    tokens, blocks, width = sum(lens), sum(n // ratio for n in lens), coff * dim
    bf16, fp32, i32 = torch.bfloat16, torch.float32, torch.int32
    return {
        "kv": ((tokens, width), bf16),
        "score": ((tokens, width), bf16),
        "ape": ((ratio, width), fp32),
        "cu_seqlens": ((len(lens) + 1,), i32),
        "cu_seqlens_comp": ((len(lens) + 1,), i32),
        "grad_out": ((blocks, dim), bf16),
        "grad_kv": ((tokens, width), bf16),
        "grad_score": ((tokens, width), bf16),
        "grad_ape": ((ratio, width), fp32),
    }


def inputs(params: dict[str, Any], device: torch.device, seed: int = 20260417) -> dict[str, Any]:
    """Seeded operands: kv, score and grad_out standard normal, APE of scale 0.5 (softmaxes
    neither flat nor one-hot), the segments' token and block offsets as the wrapper takes them
    (``cu_seqlens_comp[s + 1] - cu_seqlens_comp[s] == seqlen_s // ratio``)."""
    gen = seeded(seed, device)
    spec = shapes(params)

    def randn(name: str, scale: float = 1.0) -> torch.Tensor:
        shape, dtype = spec[name]
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

    lens = torch.tensor([0, *seqlens(params)], dtype=torch.int64)
    return {
        "kv": randn("kv"),
        "score": randn("score"),
        "ape": randn("ape", 0.5),
        "cu_seqlens": lens.cumsum(0).to(torch.int32).to(device),
        "cu_seqlens_comp": (lens // params["ratio"]).cumsum(0).to(torch.int32).to(device),
        "grad_out": randn("grad_out"),
        "ratio": int(params["ratio"]),
        "coff": int(params["coff"]),
    }


def windows(
    cu: torch.Tensor, cu_comp: torch.Tensor, ratio: int, coff: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each block's window: the token of each of its ``coff * ratio`` entries ([blocks, win],
    the previous block's ``ratio`` first where ``coff == 2``) and whether it is valid (the
    previous half of a segment's first block is not; its token is then clamped to 0)."""
    cu, cu_comp = cu.long().cpu(), cu_comp.long().cpu()
    counts = cu_comp[1:] - cu_comp[:-1]
    seg = torch.repeat_interleave(torch.arange(counts.numel()), counts)
    index_in_seg = torch.arange(seg.numel()) - cu_comp[seg]
    tok0 = (cu[seg] + index_in_seg * ratio)[:, None]
    own = tok0 + torch.arange(ratio)
    if coff == 1:
        return own, torch.ones_like(own, dtype=torch.bool)
    first = (index_in_seg == 0)[:, None].expand(-1, ratio)
    tokens = torch.cat([(own - ratio).clamp_min(0), own], dim=1)
    return tokens, torch.cat([~first, torch.ones_like(first)], dim=1)


def csa_reference(x: dict[str, Any]) -> dict[str, torch.Tensor]:
    """dKV, dScore and dAPE in float32: with ``p = softmax_k(s)``, ``s = score + ape`` over the
    window, ``dkv_k = go * p_k`` and ``ds_k = p_k * (go * kv_k - sum_i p_i * go * kv_i)``, put
    back at the window's tokens (each consumed slot belongs to one window) and, for dAPE, summed
    over the blocks into row ``k % ratio``; never-consumed slots stay zero."""
    ratio, coff = x["ratio"], x["coff"]
    tokens_n, width = x["kv"].shape
    dim = width // coff
    device = x["kv"].device
    tok, valid = (t.to(device) for t in windows(x["cu_seqlens"], x["cu_seqlens_comp"], ratio, coff))
    k = torch.arange(coff * ratio, device=device)
    half = (k // ratio).expand_as(tok)  # the column group: coff == 2, 0 for k < ratio, else 1
    kv = x["kv"].float().view(tokens_n, coff, dim)[tok, half]  # [blocks, win, dim]
    ape = x["ape"].float().view(ratio, coff, dim)[k % ratio, k // ratio]  # [win, dim]
    s = x["score"].float().view(tokens_n, coff, dim)[tok, half] + ape
    s = s.masked_fill(~valid[..., None], float("-inf"))
    kv = kv.masked_fill(~valid[..., None], 0.0)
    p = torch.softmax(s, dim=1)
    go = x["grad_out"].float()[:, None, :]
    dkv = go * p
    dp = go * kv
    ds = p * (dp - (p * dp).sum(dim=1, keepdim=True))
    grads = {}
    for name, window in (("grad_kv", dkv), ("grad_score", ds)):
        out = torch.zeros(tokens_n, coff, dim, device=device)
        out[tok[valid], half[valid]] = window[valid]
        grads[name] = out.view(tokens_n, width)
    dape = torch.zeros(ratio, coff, dim, device=device)
    dape[k % ratio, k // ratio] = ds.sum(dim=0)  # each window entry its own (row, group)
    grads["grad_ape"] = dape.view(ratio, width)
    return grads


@dataclass
class CompressorWorkload(Prepared):
    def __post_init__(self) -> None:
        from cudnn import csa_compressor_backward_wrapper

        self.fn = csa_compressor_backward_wrapper
        self.x = inputs(self.config.params, self.device)

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        # the wrapper allocates the gradients (dAPE zeroed for the atomics with the knob off)
        # and, with it on, the partial planes' workspace
        x = self.x
        operands = (x[n] for n in ("kv", "score", "ape", "cu_seqlens", "cu_seqlens_comp"))
        r = self.fn(*operands, x["grad_out"], ratio=x["ratio"], coff=x["coff"], deterministic=knob)
        return {name: r[name] for name in OUTPUTS}

    def reference(self) -> dict[str, torch.Tensor]:
        return csa_reference(self.x)


SUBJECT = Harness(DECLARATION, CompressorWorkload)


def compile_target(config: Config, knob: bool) -> tuple[Any, Any, list[Any]]:
    """For ``base.compile_only``: the public wrapper called on fake CUDA tensors; its plan's
    ``compile`` JIT-compiles the backward kernel (dAPE into partial planes with the knob on,
    atomics with it off) and, with the knob on, the dAPE fold, then ``base`` stops the call."""
    import warnings
    from contextlib import ExitStack
    from types import SimpleNamespace
    from unittest import mock

    from cudnn.csa.compressor import api, compressor_sm100

    p = config.params
    spec = shapes(p)
    kv, score, ape, cu, cu_comp, go = fake_cuda(*list(spec.values())[:6])
    real_zeros = torch.zeros

    def zeros(*size: Any, device: Any = None, dtype: Any = None, **kw: Any) -> torch.Tensor:
        if device is not None and torch.device(device).type == "cuda":
            shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], tuple | list) else size
            return fake_cuda((tuple(shape), dtype or torch.float32))[0]
        return real_zeros(*size, device=device, dtype=dtype, **kw)

    def call() -> None:
        with ExitStack() as stack, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
            patch = stack.enter_context
            # compressor_sm100.py:1046,1094-1096: 16-element device scratch, only its pointer traced
            patch(mock.patch.object(torch, "zeros", zeros))
            # compressor_sm100.py:1047,1097: CUstream(torch.cuda.current_stream(device).cuda_stream)
            stream = SimpleNamespace(cuda_stream=0)
            patch(mock.patch.object(torch.cuda, "current_stream", lambda *_a, **_k: stream))
            # compressor_sm100.py:1015,1031: the capture guard before each cute.compile
            patch(mock.patch.object(torch.cuda, "is_current_stream_capturing", lambda: False))
            api.csa_compressor_backward_wrapper(kv, score, ape, cu, cu_comp, go, ratio=p["ratio"],
                                                coff=p["coff"], deterministic=knob)  # fmt: skip

    return call, api.CSACompressorBackward, [api, compressor_sm100]
