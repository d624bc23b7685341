"""``dsa_indexer_bwd``, the DSA indexer backward: its inputs, its float32 reference and its
tolerances on CPU; its sm_100a kernels compiled from the real 1.32.0 wheel without that GPU.

The reference is held against the KL loss it differentiates (the logits over every key, masked
to each query's selection, through float64 autograd), and a bf16 emulation of the kernel's
roundings (dS before the GEMMs, dQ and dW at the store) against the declared tolerances. The
kernel itself runs only on an sm_100 GPU, which this host lacks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.subjects import SUBJECTS
from runner.inside.subjects import base, dsa_indexer_bwd
from runner.inside.subjects.dsa_indexer_bwd import (
    D,
    gradient_signal,
    indexer_reference,
    inputs,
    shapes,
)
from testkit.compile_only import compile_in_release

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]
TINY = {"b": 2, "s_q": 6, "s_k": 40, "h": 4, "topk": 8, "planes": 96}


def test_each_query_selects_distinct_keys_and_both_distributions_sum_to_one() -> None:
    x = inputs(TINY, CPU)
    spec = shapes(TINY)
    for name in ("index_q", "weights", "index_k", "attn_score", "index_score", "topk_indices"):
        assert (tuple(x[name].shape), x[name].dtype) == spec[name], name
    idx = x["topk_indices"].reshape(-1, TINY["topk"])
    assert all(row.unique().numel() == TINY["topk"] for row in idx)  # the kernel's contract
    assert int(idx.min()) >= 0 and int(idx.max()) < TINY["s_k"]  # local ids
    for name in ("attn_score", "index_score"):
        torch.testing.assert_close(x[name].sum(-1), torch.ones(2, 6))
    # loss_coeff / (b * s_q) is topk: the signal, and so the gradients, of order one
    assert x["loss_coeff"] / (TINY["b"] * TINY["s_q"]) == TINY["topk"]
    assert torch.equal(inputs(TINY, CPU)["topk_indices"], x["topk_indices"])  # seeded


def test_the_reference_is_the_gradient_of_the_kl_loss_over_the_selected_keys() -> None:
    """Autograd in float64 through the loss itself, the logits computed over every key and
    gathered at each query's selection, the predicted distribution being their softmax."""
    x = inputs(TINY, CPU)
    q, w, k = (x[n].detach().double().requires_grad_() for n in ("index_q", "weights", "index_k"))
    scores = torch.relu(x["sm_scale"] * torch.einsum("bthd,bsd->bths", q, k))
    z = torch.einsum("bth,bths->bts", w, scores).gather(2, x["topk_indices"].long())
    # the kernel takes the predicted distribution as given: give it this forward's
    x["index_score"] = torch.softmax(z.detach(), dim=-1).float()
    scale = x["loss_coeff"] / (TINY["b"] * TINY["s_q"])
    (-scale * (x["attn_score"].double() * torch.log_softmax(z, dim=-1)).sum()).backward()
    got = indexer_reference(x, chunk=4)  # two chunks of queries
    for name, leaf in (("d_index_q", q), ("d_weights", w), ("d_index_k", k)):
        assert leaf.grad is not None and float(leaf.grad.abs().max()) > 0.1
        torch.testing.assert_close(got[name].double(), leaf.grad, rtol=1e-4, atol=1e-4)


def test_the_gradient_signal_clips_targets_and_masks_predictions_as_the_kernel_does() -> None:
    tiny = base.torch.tensor([[0.0, 0.5, 0.5]])
    predict = torch.tensor([[0.0, 0.25, 0.75]])  # the first slot below the clip: masked
    g = gradient_signal(tiny, predict, 2.0)
    clipped = dsa_indexer_bwd.CLIP_PROB_MIN
    raw = torch.tensor([[0.0, -1.0, -1.0]])  # -t * mask * scale; t = 0 clipped, then masked
    expected = raw - predict * raw.sum()
    torch.testing.assert_close(g, expected)
    assert clipped == pytest.approx(2.718281828459045**-100, rel=1e-12)


def _kernel_roundings(x: dict[str, Any]) -> dict[str, torch.Tensor]:
    """dQ, dW, dK as the kernel rounds them: dS stored in bf16 before the dK and dQ GEMMs
    (float32 accumulation), dQ and dW stored in bf16, dK kept in float32."""
    b, s_q = x["index_q"].shape[:2]
    signal = gradient_signal(x["attn_score"], x["index_score"], x["loss_coeff"] / (b * s_q))
    q, w, k = (x[n].float() for n in ("index_q", "weights", "index_k"))
    rows = k[torch.arange(b).view(b, 1, 1), x["topk_indices"].long()]  # [b, t, j, D]
    s = x["sm_scale"] * torch.einsum("bthd,btjd->bthj", q, rows)
    positive = (s > 0).float()
    ds = (signal[:, :, None, :] * w[..., None] * positive).bfloat16().float()
    dw = (signal[:, :, None, :] * s * positive).sum(-1)
    dq = x["sm_scale"] * torch.einsum("bthj,btjd->bthd", ds, rows)
    dk = torch.zeros_like(k)
    per_slot = x["sm_scale"] * torch.einsum("bthj,bthd->btjd", ds, q)
    dk.index_put_((torch.arange(b).view(b, 1, 1).expand_as(x["topk_indices"]),
                   x["topk_indices"].long()), per_slot, accumulate=True)  # fmt: skip
    return {"d_index_q": dq.bfloat16().float(), "d_weights": dw.bfloat16().float(),
            "d_index_k": dk}  # fmt: skip


def _outside(got: torch.Tensor, ref: torch.Tensor, name: str) -> int:
    tol = dsa_indexer_bwd.TOLERANCES[name]
    return int(((got - ref).abs() > tol.atol + tol.rtol * ref.abs()).sum())


@pytest.mark.slow
def test_the_kernels_roundings_stay_inside_the_declared_tolerances() -> None:
    """At the smallest declared config: the roundings the kernel must make (bf16 dS, bf16 dQ and
    dW) move each output measurably, and by less than half its bound, so the tolerances leave
    room for the accumulation order and still catch a wrong gradient: one query's share of dK
    lost (an atomic or a plane the fold skips), one query's dQ and dW never stored."""
    params = dsa_indexer_bwd.CONFIGS[0].params
    x = inputs(params, CPU)
    ref = indexer_reference(x)
    emulated = _kernel_roundings(x)
    for name, tol in dsa_indexer_bwd.TOLERANCES.items():
        err = (emulated[name] - ref[name]).abs()
        used = float((err / (tol.atol + tol.rtol * ref[name].abs())).max())
        assert 0 < used < 0.5, (name, used)
    s_q = params["s_q"]
    short = dict(x, loss_coeff=x["loss_coeff"] * (s_q - 1) / s_q)
    for name in ("index_q", "weights", "attn_score", "index_score", "topk_indices"):
        short[name] = x[name][:, : s_q - 1]
    lost = indexer_reference(short)["d_index_k"]  # the last query's share of dK missing
    assert _outside(lost, ref["d_index_k"], "d_index_k") > 100
    for name in ("d_index_q", "d_weights"):
        unstored = ref[name].clone()
        unstored[:, -1] = 0
        assert _outside(unstored, ref[name], name) > 0, name


def test_every_logit_is_exact_and_nonzero_so_the_relu_gate_cannot_flip() -> None:
    """The kernel and the reference sum ``q . k`` in different orders: a logit near zero could
    pass the relu in one and not the other, and move dQ and dK by a whole term (up to 0.22 on an
    H100 with normal draws, against a bound of 0.02). On the inputs' grid every dot product is
    the same in float32 in any order as in float64, at least 1/16 from zero, and about half of
    them are negative, so the gate is still exercised."""
    x = inputs(dsa_indexer_bwd.CONFIGS[0].params, CPU)
    q, k = x["index_q"][0].float(), x["index_k"][0].float()
    forward = torch.einsum("thd,sd->ths", q, k)
    backward = torch.einsum("thd,sd->ths", q.flip(-1), k.flip(-1))
    exact = torch.einsum("thd,sd->ths", q.double(), k.double())
    assert torch.equal(forward.double(), exact) and torch.equal(backward, forward)
    assert float(exact.abs().min()) >= 1 / 16
    assert 0.45 < float((exact > 0).double().mean()) < 0.55
    assert 0.9 < float(q.std()) < 1.1 and 0.9 < float(k.std()) < 1.1  # about N(0, 1), as before


def test_the_compile_plan_uses_fake_cuda_tensors_of_the_declared_shapes() -> None:
    entry = SUBJECTS["dsa_indexer_bwd"]
    assert entry.compile_only and entry.families == ("sm_100",) and entry.knob == "deterministic"
    spec = shapes(dict(entry.configs[0][1]))
    made = base.fake_cuda(*spec.values())
    assert [(tuple(t.shape), t.dtype, t.device.type) for t in made] == [
        (shape, dtype, "cuda") for shape, dtype in spec.values()
    ]
    assert spec["d_index_k"][1] == torch.float32 and spec["index_q"][0][-1] == D
    # every declared config is one the deterministic kernel accepts: H 32 or 64, D 128,
    # topk a multiple of 128 in [128, 2048], planes 96, 128 or 148
    for _name, p in entry.configs:
        assert p["h"] in (32, 64) and p["topk"] % 128 == 0 and 128 <= p["topk"] <= 2048
        assert p["planes"] in (96, 128, 148)


@pytest.mark.slow
def test_its_kernels_compile_for_sm100a_from_the_real_wheel_the_fold_on_the_knobs_side_only(
    tmp_path: Path,
) -> None:
    """The real 1.32.0 wheel on this CPU-only host. The kernels compile lazily at their first
    launch: the deterministic arm is the GEMM writing dK into the planes and the planes' fold, the
    default arm the GEMM alone, and the knob changes the GEMM itself (compared kernel by kernel,
    so the fold alone would not count as a change)."""
    result = compile_in_release("dsa_indexer_bwd", tmp_path)
    assert result["status"] == "pass", result
    assert result["config"]["name"] == dsa_indexer_bwd.COMPILE_CONFIG
    det, default = result["deterministic"], result["default"]
    assert (det["kernels"], default["kernels"]) == (2, 1)
    assert det["targets"] == default["targets"] == ["sm_100a"]
    assert default["cubin_bytes"] > 10_000 and det["cubin_bytes"] > default["cubin_bytes"]
    assert result["knob_changes_kernel"] is True
