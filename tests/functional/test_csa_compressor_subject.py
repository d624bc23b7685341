"""``csa_compressor_bwd``, the CSA/HCA compressor backward: its inputs, its float32 reference and
its tolerances on CPU; its sm_100a kernels compiled from the real 1.32.0 wheel without that GPU.

The reference is held against float64 autograd through the forward written the eager way (each
segment cut into blocks, the previous block's first half shifted in), which would catch a wrong
window, and a float32 emulation of the kernel (its expression tree, its bf16 stores, its per-CTA
dAPE sums) against the declared tolerances. The kernel itself runs only on an sm_100 GPU, which
this host lacks.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch

from core.subjects import SUBJECTS
from runner.inside.subjects import csa_compressor_bwd
from runner.inside.subjects.csa_compressor_bwd import (
    ROWS_PER_CTA,
    csa_reference,
    inputs,
    shapes,
    windows,
)
from testkit.compile_only import compile_in_release

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]
# uneven segments with tails, one shorter than ratio (no block), a head_dim of 6
TINY: dict[str, Any] = {"lens": [13, 3, 22, 9], "dim": 6, "ratio": 4, "coff": 2}


def test_the_inputs_are_thd_packed_segments_as_the_wrapper_takes_them() -> None:
    x = inputs(TINY, CPU)
    spec = shapes(TINY)
    for name in ("kv", "score", "ape", "cu_seqlens", "cu_seqlens_comp", "grad_out"):
        assert (tuple(x[name].shape), x[name].dtype) == spec[name], name
    assert x["cu_seqlens"].tolist() == [0, 13, 16, 38, 47]
    assert x["cu_seqlens_comp"].tolist() == [0, 3, 3, 8, 10]  # seqlen // ratio blocks each
    assert spec["grad_out"][0] == (10, 6) and spec["kv"][0] == (47, 12)  # coff * head_dim wide
    assert torch.equal(inputs(TINY, CPU)["kv"], x["kv"])  # seeded
    # the declared configs: b segments of t tokens, each with a tail
    for _name, p in SUBJECTS["csa_compressor_bwd"].configs:
        assert csa_compressor_bwd.seqlens(dict(p)) == [p["t"]] * p["b"] and p["t"] % p["ratio"]


def _eager_grads(x: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Float64 autograd through the forward written segment by segment: the segment's whole
    blocks as ``[blocks, ratio, coff, dim]``; with ``coff == 2`` each block's window is the
    previous block's first half (the segment's first block: score -inf, kv 0) then its own
    second half, APE added by the token's place in its block."""
    ratio, coff = x["ratio"], x["coff"]
    kv, score, ape = (x[n].detach().double().requires_grad_() for n in ("kv", "score", "ape"))
    dim = kv.shape[1] // coff
    cu = x["cu_seqlens"].tolist()
    pooled = []
    for t0, t1 in itertools.pairwise(cu):
        n = (t1 - t0) // ratio
        if n == 0:
            continue
        blk_kv = kv[t0 : t0 + n * ratio].view(n, ratio, coff, dim)
        blk_s = score[t0 : t0 + n * ratio].view(n, ratio, coff, dim) + ape.view(ratio, coff, dim)
        if coff == 2:
            none_s = torch.full((1, ratio, dim), float("-inf"), dtype=torch.float64)
            none_kv = torch.zeros(1, ratio, dim, dtype=torch.float64)
            win_s = torch.cat([torch.cat([none_s, blk_s[:-1, :, 0]]), blk_s[:, :, 1]], dim=1)
            win_kv = torch.cat([torch.cat([none_kv, blk_kv[:-1, :, 0]]), blk_kv[:, :, 1]], dim=1)
        else:
            win_s, win_kv = blk_s[:, :, 0], blk_kv[:, :, 0]
        pooled.append((win_kv * torch.softmax(win_s, dim=1)).sum(dim=1))
    (torch.cat(pooled) * x["grad_out"].double()).sum().backward()
    assert kv.grad is not None and score.grad is not None and ape.grad is not None
    return {"grad_kv": kv.grad, "grad_score": score.grad, "grad_ape": ape.grad}


def _agrees(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> bool:
    return all(torch.allclose(got[n].double(), want[n], rtol=1e-5, atol=1e-5) for n in want)


@pytest.mark.parametrize("coff", [2, 1])
def test_the_reference_is_the_gradient_of_the_pooling_through_float64_autograd(
    coff: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = inputs({**TINY, "coff": coff}, CPU)
    want = _eager_grads(x)
    got = csa_reference(x)
    for name in want:
        assert float(want[name].abs().max()) > 0.1, name
        torch.testing.assert_close(got[name].double(), want[name], rtol=1e-5, atol=1e-5)
    dkv = want["grad_kv"].view(-1, coff, TINY["dim"])
    assert bool((dkv[13:16] == 0).all()) and bool((dkv[12] == 0).all())  # short segment, tail
    if coff == 2:  # the first half of the last block's tokens: no next block consumes them
        assert bool((dkv[8:12, 0] == 0).all()) and bool((dkv[4:8, 0] != 0).all())
    assert len(windows(x["cu_seqlens"], x["cu_seqlens_comp"], 4, coff)[0]) == 10
    # the comparison catches a wrong window: the first block's previous half taken as valid,
    # or the previous half read from the block's own tokens
    real = csa_compressor_bwd.windows

    def all_valid(*args: Any) -> tuple[torch.Tensor, torch.Tensor]:
        tok, valid = real(*args)
        return tok, torch.ones_like(valid)

    def unshifted(*args: Any) -> tuple[torch.Tensor, torch.Tensor]:
        tok, valid = real(*args)
        return torch.cat([tok[:, 4:], tok[:, 4:]], dim=1)[:, : tok.shape[1]], valid

    for wrong in (all_valid, unshifted) if coff == 2 else ():
        monkeypatch.setattr(csa_compressor_bwd, "windows", wrong)
        assert not _agrees(csa_reference(x), want), wrong.__name__


def _kernel_emulation(x: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The kernel's float32 dataflow (``_compressor_bwd_kernel``): serial max, exp, serial sum
    ``den``; ``p = e / den``, ``dp = go * kv``, ``S`` the serial sum of the rounded ``dp * p``,
    ``ds = fma(p, -S, dp * p)``; bf16 stores of ``go * p`` and ``ds``; dAPE summed serially over
    each CTA's 8 blocks, then the CTAs' partials in CTA order."""
    ratio, coff = x["ratio"], x["coff"]
    tokens_n, width = x["kv"].shape
    dim = width // coff
    tok, valid = windows(x["cu_seqlens"], x["cu_seqlens_comp"], ratio, coff)
    k = torch.arange(coff * ratio)
    half = (k // ratio).expand_as(tok)
    ape = x["ape"].view(ratio, coff, dim)[k % ratio, k // ratio]
    s = x["score"].float().view(tokens_n, coff, dim)[tok, half] + ape
    s = s.masked_fill(~valid[..., None], float("-inf"))
    kv = x["kv"].float().view(tokens_n, coff, dim)[tok, half].masked_fill(~valid[..., None], 0.0)
    go = x["grad_out"].float()[:, None, :]
    e = torch.exp(s - s.amax(dim=1, keepdim=True))
    den = torch.zeros_like(e[:, 0])
    for i in range(e.shape[1]):
        den = den + e[:, i]
    p = e / den[:, None]
    dp = go * kv
    dpp = dp * p
    big_s = torch.zeros_like(den)
    for i in range(e.shape[1]):
        big_s = big_s + dpp[:, i]
    ds = (p.double() * -big_s.double()[:, None] + dpp.double()).float()  # one rounding: fma
    ds = ds * valid[..., None]
    out: dict[str, torch.Tensor] = {}
    for name, window in (("grad_kv", go * p), ("grad_score", ds)):
        grad = torch.zeros(tokens_n, coff, dim)
        grad[tok[valid], half[valid]] = window[valid].bfloat16().float()
        out[name] = grad.view(tokens_n, width)
    ctas = -(-ds.shape[0] // ROWS_PER_CTA)
    rows = torch.zeros(ctas * ROWS_PER_CTA, *ds.shape[1:])
    rows[: ds.shape[0]] = ds
    rows = rows.view(ctas, ROWS_PER_CTA, *ds.shape[1:])
    partial = torch.zeros(ctas, *ds.shape[1:])
    for r in range(ROWS_PER_CTA):
        partial = partial + rows[:, r]
    total = torch.zeros(ds.shape[1:])
    for c in range(ctas):
        total = total + partial[c]
    dape = torch.zeros(ratio, coff, dim)
    dape[k % ratio, k // ratio] = total
    out["grad_ape"] = dape.view(ratio, width)
    return out


def test_the_kernels_numerics_stay_inside_the_declared_tolerances() -> None:
    """At the smallest declared config: the kernel's own float32 order and its bf16 stores move
    each output measurably, and by less than half its bound; a gradient off by 5% of its
    largest entry somewhere would be caught."""
    params = csa_compressor_bwd.CONFIGS[0].params
    x = inputs(params, CPU)
    ref = csa_reference(x)
    emulated = _kernel_emulation(x)
    used_by = {}
    for name, tol in csa_compressor_bwd.TOLERANCES.items():
        bound = tol.atol + tol.rtol * ref[name].abs()
        used_by[name] = float(((emulated[name] - ref[name]).abs() / bound).max())
        assert 0 < used_by[name] < 0.5, (name, used_by[name])
        wrong = ref[name].clone()
        flat = wrong.view(-1)
        top = int(flat.abs().argmax())
        flat[top] += 0.05 * float(flat[top].abs())
        assert bool(((wrong - ref[name]).abs() > bound).any()), name
    print("fraction of each bound used:", used_by)


def test_the_declared_configs_are_inside_check_supports_envelope() -> None:
    """api.py's ``check_support`` (ratio 4: coff 1 or 2; int32 flat offsets; head_dim within
    the launch bound; at least ratio tokens) and the deterministic workspace's int32 bound, and
    enough CTAs that the ratio-4 fold's first stage has several 32-partial groups."""
    entry = SUBJECTS["csa_compressor_bwd"]
    assert entry.compile_only and entry.families == ("sm_100",) and entry.knob == "deterministic"
    assert entry.entry_point == "cudnn.csa_compressor_backward_wrapper"
    for name, p in entry.configs:
        spec = shapes(dict(p))
        (tokens, width), (blocks, dim) = spec["kv"][0], spec["grad_out"][0]
        assert name == f"b{p['b']}_t{p['t']}_dim{p['dim']}_r{p['ratio']}_coff{p['coff']}"
        assert p["ratio"] == 4 and p["coff"] == 2 and dim == p["dim"] and width == 2 * dim
        assert tokens * width < 2**31 and blocks * dim < 2**31 and dim <= 128 * 65535
        assert tokens >= p["ratio"] and blocks == p["b"] * (p["t"] // p["ratio"])
        partials = -(-blocks // ROWS_PER_CTA)
        nelems = p["ratio"] * width
        assert (partials + -(-partials // 32)) * nelems < 2**31
        assert partials >= 256 and -(-partials // 32) >= 8  # contended: 256+ adds per entry
    assert entry.configs[0][0] == csa_compressor_bwd.COMPILE_CONFIG


@pytest.mark.slow
def test_its_kernels_compile_for_sm100a_from_the_real_wheel_the_fold_on_the_knobs_side_only(
    tmp_path: Path,
) -> None:
    """The real 1.32.0 wheel on this CPU-only host, through the public wrapper: the
    deterministic arm is the backward writing dAPE partial planes, then the two-stage fold (one
    compiled module); the default arm the backward with its fp32 atomics. The backward comes
    first in both arms and differs between them."""
    result = compile_in_release("csa_compressor_bwd", tmp_path)
    assert result["status"] == "pass", result
    assert result["config"]["name"] == csa_compressor_bwd.COMPILE_CONFIG
    det, default = result["deterministic"], result["default"]
    assert (det["kernels"], default["kernels"]) == (2, 1)
    assert det["targets"] == default["targets"] == ["sm_100a"]
    assert default["cubin_bytes"] > 10_000 and det["cubin_bytes"] > default["cubin_bytes"]
    assert det["ptx_sha256"] != default["ptx_sha256"]
    assert result["knob_changes_kernel"] is True
